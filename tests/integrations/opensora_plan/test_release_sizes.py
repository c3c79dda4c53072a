"""The released configurations build the documented tensors (built on the meta device: no memory):
the transformer's 687 tensors / 2,771,981,600 parameters, WFVAE's 37.18M encoder and 108.39M
(connect_res_layer_num 1) or 110.17M (2) decoder parameters, 260 state entries with 2."""

import torch

from pipedit.integrations.opensora_plan.transformer import OpenSoraPlanTransformer, TransformerConfig
from pipedit.integrations.opensora_plan.wfvae import WFVAE, WFVAEConfig

RELEASED_DIT = dict(num_attention_heads=24, attention_head_dim=96, in_channels=8, out_channels=8, num_layers=32,
                    cross_attention_dim=2304, caption_channels=4096, activation_fn="gelu-approximate", sparse1d=True,
                    sparse_n=4, patch_size=2, patch_size_t=1, sample_size_h=[80, 80], sample_size_w=[80, 80])


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_released_transformer_has_the_documented_tensors():
    with torch.device("meta"):
        model = OpenSoraPlanTransformer(TransformerConfig.from_dict(RELEASED_DIT))
    state = model.state_dict()
    assert len(state) == 687 and _count(model) == 2_771_981_600
    assert state["adaln_single.linear.weight"].shape == (13824, 2304)
    assert state["proj_out.weight"].shape == (32, 2304)
    assert state["transformer_blocks.31.ff.net.0.proj.weight"].shape == (9216, 2304)
    assert state["transformer_blocks.0.attn2.to_k.weight"].shape == (2304, 2304)


def test_released_wfvae_sizes_for_both_connect_values():
    sizes = {}
    for connect in (1, 2):
        config = WFVAEConfig.from_dict({"norm_type": "layernorm", "connect_res_layer_num": connect})
        with torch.device("meta"):
            vae = WFVAE(config)
        sizes[connect] = (round(_count(vae.encoder) / 1e6, 2), round(_count(vae.decoder) / 1e6, 2), len(vae.state_dict()))
    assert sizes == {1: (37.18, 108.39, 244), 2: (37.18, 110.17, 260)}
