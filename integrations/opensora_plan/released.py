"""OpenSoraPlan v1.3's released configs (no weights) in the official layout the adapter reads: the
any93x640x640 transformer (32 layers, 24 heads x 96, Skiparse sparse_n 4, mT5-xxl captions), WFVAE
D8 4x8x8 and google/mt5-xxl's encoder. Widths and depths agree with .planner's full-size spec (a
test checks the parameter counts)."""

from __future__ import annotations

from pathlib import Path

from pipedit.dryrun.released import write_config

_TRANSFORMER = {
    "_class_name": "OpenSoraT2V_v1_3", "num_attention_heads": 24, "attention_head_dim": 96, "in_channels": 8,
    "out_channels": 8, "num_layers": 32, "cross_attention_dim": 2304, "attention_bias": True,
    "sample_size_h": [80, 80], "sample_size_w": [80, 80], "sample_size_t": 24, "patch_size": 2, "patch_size_t": 1,
    "activation_fn": "gelu-approximate", "norm_elementwise_affine": False, "norm_eps": 1e-6,
    "caption_channels": 4096, "interpolation_scale_h": 1.0, "interpolation_scale_w": 1.0,
    "interpolation_scale_t": 1.0, "sparse1d": True, "sparse_n": 4,
}
_WFVAE = {
    "_class_name": "WFVAEModel", "latent_dim": 8, "base_channels": 128, "encoder_num_resblocks": 2,
    "encoder_energy_flow_hidden_size": 64, "decoder_num_resblocks": 2, "decoder_energy_flow_hidden_size": 128,
    "use_attention": True, "norm_type": "layernorm", "t_interpolation": "trilinear", "connect_res_layer_num": 2,
    "scale": [0.18215] * 8, "shift": [0.0] * 8, "attention_type": "AttnBlock3DFix",
}
_MT5_XXL = {
    "model_type": "mt5", "architectures": ["MT5EncoderModel"], "d_model": 4096, "d_ff": 10240, "d_kv": 64,
    "num_heads": 64, "num_layers": 24, "vocab_size": 250112, "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32, "tie_word_embeddings": False,
}



def write_release(model: str, root: Path) -> Path:
    write_config(root / "any93x640x640", "config.json", _TRANSFORMER)
    write_config(root / "vae", "config.json", _WFVAE)
    write_config(root / "text_encoder", "config.json", _MT5_XXL)
    return root
