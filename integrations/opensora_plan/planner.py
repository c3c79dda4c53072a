"""The planner's view of OpenSoraPlan v1.3 (pipedit.planner): the full-size spec, the spec of a
checkpoint, and the WFVAE decode's FLOPs, peak memory and split over decode ranks.

Full size: 2.77B parameters, 32 layers, 24 heads x 96, Skiparse sparse_n 4 on layers 2..29,
cross-attention to 512 mT5 tokens, WFVAE 4x8x8. The WFVAE decoder follows the structure in the
facts sheet (§3), with its wavelet branches; its peak reuses HunyuanVideo's ACTIVATION_FACTOR on
the decoder's largest activation (256 channels at a quarter of the output's area, 2T-1 frames).
Split over decode ranks: the head (conv_in + mid block, ~1-2% of the FLOPs) runs on every rank; the
tail on a band of h/N latent rows plus a halo on each inner side: (h/N + 2 halo) / h of the rows.
A rank holds the largest activation over its band's rows plus the decoded pieces: the whole video
on the lead, 1/N elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from pipedit.planner.cost import ACT_BYTES, Shape
from pipedit.planner.models import ModelSpec, TextEncoder, read_config, with_param_counts
from pipedit.planner.split_decode import Unsplit, output_bytes
from pipedit.planner.vae_cost import attention_flops, conv_flops, resnet_flops

# WFVAE-S decoder (facts sheet §3): base 128 channels, energy-flow 128, connect_res_layer_num 2.
WFVAE = {"latent_channels": 8, "base_channels": 128, "decoder_energy_flow_hidden_size": 128,
         "connect_res_layer_num": 2, "spatial_compression_ratio": 8, "temporal_compression_ratio": 4}
HALO_RELEASED = 10  # split_decode.tail_halo for the release


def opensora_plan() -> ModelSpec:
    return ModelSpec(
        name="OpenSoraPlan v1.3 (2.8B)", family="opensora-plan", hidden=2304, heads=24, head_dim=96,
        dual_layers=0, single_layers=32, mlp_ratio=4.0, text_tokens=512, cross_attention=True,
        sparse_layers=28, sparse_n=4, cfg_batch=2, dit_params=2.77e9, latent_channels=8,
        vae=WFVAE, vae_params=146e6,
        text_encoders=(TextEncoder("mt5-xxl-encoder", 5.7e9, 512),),
    )


SIZES = {"opensora-plan": opensora_plan}


def from_checkpoint(root: Path) -> ModelSpec:
    """diffusers layout: transformer/; the release layout: any93x640x640/ (or the one folder
    holding its transformer config)."""
    folder = root / "transformer"
    if not (folder / "config.json").is_file():
        from .checkpoint import find_transformer_folder

        folder = find_transformer_folder(root)
    dit = read_config(folder / "config.json")
    vae = read_config(root / "vae" / "config.json")
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    layers = int(dit["num_layers"])
    # Skiparse layers are 2..29 whatever the depth (facts sheet §1).
    sparse = max(0, min(layers, 30) - 2) if dit.get("sparse1d", True) else 0
    vae_config = {**WFVAE, **{k: vae[k] for k in WFVAE if k in vae}}
    vae_config["latent_channels"] = int(vae.get("latent_dim", vae_config["latent_channels"]))
    spec = replace(opensora_plan(), name=f"{root.name} (OpenSoraPlan, {heads}x{head_dim})", heads=heads,
                   head_dim=head_dim, hidden=heads * head_dim, single_layers=layers, sparse_layers=sparse,
                   sparse_n=int(dit.get("sparse_n", 4)), latent_channels=int(dit["in_channels"]), vae=vae_config)
    return with_param_counts(spec, folder, root)


def decode_flops(vae: dict, height: int, width: int, frames: int, tiled: bool) -> float:
    t, s = vae["temporal_compression_ratio"], vae["spatial_compression_ratio"]
    lt, lh, lw = (frames - 1) // t + 1, height // s, width // s
    base = vae["base_channels"]
    c, e, k = 4 * base, vae["decoder_energy_flow_hidden_size"], vae["connect_res_layer_num"]  # 512 released
    v0 = lt * lh * lw
    v1 = (2 * lt - 1) * 4 * lh * lw
    v2 = (2 * lt - 1) * 16 * lh * lw
    flops = conv_flops(vae["latent_channels"], c, v0)
    flops += resnet_flops(c, c, v0) + attention_flops(c, lh * lw, lt) + resnet_flops(c, c + e, v0)
    flops += k * resnet_flops(e, e, v0) + conv_flops(e, 24, v0, 9)  # connect_l2
    flops += 2 * resnet_flops(c, c, v0) + conv_flops(c, c, v1) + resnet_flops(c, c + e, v1)  # up2
    flops += k * resnet_flops(e, e, v1) + conv_flops(e, 12, v1, 9)  # connect_l1
    flops += resnet_flops(c, 2 * base, v1) + resnet_flops(2 * base, 2 * base, v1)  # up1
    flops += conv_flops(2 * base, 2 * base, v2, 9) + resnet_flops(2 * base, 2 * base, v2)
    flops += resnet_flops(2 * base, base, v2) + resnet_flops(base, base, v2) + conv_flops(base, 24, v2, 9)
    # Temporal chunks of 2 latent frames overlapping by one: 1.5x the work.
    return flops * (1.5 if tiled else 1.0)


def vae_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    return decode_flops(model.vae, height, width, frames, tiled)


def decode_peak_bytes(model: ModelSpec, shape: Shape, tiled: bool) -> float:
    from pipedit.integrations.hunyuan_video.vae_memory import ACTIVATION_FACTOR

    lt, lh, lw = model.latent_shape(shape.height, shape.width, shape.frames)
    frames = 2 * lt - 1 if not tiled else 3
    largest = 2 * model.vae["base_channels"] * frames * 16 * lh * lw
    return ACTIVATION_FACTOR * largest * ACT_BYTES


class RowBands(Unsplit):
    """Bands of latent rows, each with a halo on its inner sides; a rank holds the largest
    activation over its band plus the decoded pieces (the whole video on the lead)."""

    def units(self, model: ModelSpec, shape: Shape, tiled: bool) -> int:
        return model.latent_shape(shape.height, shape.width, shape.frames)[1]

    def slowest_share(self, count: int, ranks: int) -> float:
        band = min(count, math.ceil(count / ranks) + 2 * HALO_RELEASED)
        return band / count

    def rank_bytes(self, unit_peak: float, model: ModelSpec, shape: Shape, tiled: bool, ranks: int,
                   lead: bool) -> float:
        held = output_bytes(model, shape) * (1 if lead else 1 / ranks)
        return unit_peak * self.slowest_share(self.units(model, shape, tiled), ranks) + held


ROW_BANDS = RowBands()
