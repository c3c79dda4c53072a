"""The planner's view of HunyuanVideo (pipedit.planner): the full-size spec, the spec of a
checkpoint, and the VAE decode's FLOPs, peak memory and split over decode ranks.

Full size: HunyuanVideo as released (diffusers HunyuanVideoTransformer3DModel: 20 dual-stream +
40 single-stream blocks, 3072 = 24 heads x 128). The causal 3D VAE (diffusers
AutoencoderKLHunyuanVideo): conv_in, a mid block (two resnets and single-head attention over a
pass's latent tokens), up blocks of layers_per_block + 1 resnets with 3x3x3 convolutions,
upsamplers that double space and/or time, conv_out. diffusers decodes long videos in overlapping
framewise passes (vae_memory.decode_passes) and, tiled, in overlapping 256-pixel spatial tiles
(stride 192). Its peak is vae_memory's predictor (calibrated on CPU, see its docstring); tiled, the
same predictor on one 256-pixel tile's latents.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from pipedit.planner.cost import Shape
from pipedit.planner.models import ModelSpec, TextEncoder, checkpoint_text_encoders, read_config, with_param_counts
from pipedit.planner.split_decode import Unsplit
from pipedit.planner.vae_cost import TILE, TILE_STRIDE, attention_flops, conv_flops, resnet_flops, tile_factor

# diffusers AutoencoderKLHunyuanVideo defaults = the released VAE.
VAE = {"latent_channels": 16, "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
       "spatial_compression_ratio": 8, "temporal_compression_ratio": 4, "out_channels": 3,
       "mid_block_add_attention": True}


def hunyuan_video() -> ModelSpec:
    return ModelSpec(
        name="HunyuanVideo (13B)", family="hunyuan-video", hidden=3072, heads=24, head_dim=128,
        dual_layers=20, single_layers=40, mlp_ratio=4.0, text_tokens=256, cross_attention=False,
        dit_params=12.8e9, latent_channels=16, vae=VAE, vae_params=246e6,
        # LLaMA-3-8B-based MLLM encoder (256 prompt tokens) and CLIP ViT-L/14's text model (77).
        text_encoders=(TextEncoder("llava-llama-3-8b", 7.5e9, 256), TextEncoder("clip-vit-l", 123e6, 77)),
        text_beside_vae=True,
    )


SIZES = {"hunyuan-video": hunyuan_video}


def from_checkpoint(root: Path) -> ModelSpec:
    folder = root / "transformer"
    dit = read_config(folder / "config.json")
    vae = read_config(root / "vae" / "config.json")
    base = hunyuan_video()
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    vae_config = {**VAE, **{k: vae[k] for k in VAE if k in vae}}
    spec = replace(base, name=f"{root.name} (HunyuanVideo, {heads}x{head_dim})", heads=heads,
                   head_dim=head_dim, hidden=heads * head_dim, dual_layers=int(dit["num_layers"]),
                   single_layers=int(dit["num_single_layers"]), mlp_ratio=float(dit.get("mlp_ratio", 4.0)),
                   patch=(int(dit.get("patch_size_t", 1)), int(dit["patch_size"]), int(dit["patch_size"])),
                   latent_channels=int(dit["in_channels"]), vae=vae_config,
                   text_encoders=checkpoint_text_encoders(root, base.text_encoders))
    return with_param_counts(spec, folder, root)


def pass_flops(vae: dict, frames: int, height: int, width: int) -> float:
    """One decoder pass over latents of (frames, height, width)."""
    channels = list(reversed(vae["block_out_channels"]))
    blocks = len(channels)
    spatial_ups = int(math.log2(vae["spatial_compression_ratio"]))
    temporal_ups = int(math.log2(vae["temporal_compression_ratio"]))
    resnets = vae["layers_per_block"] + 1
    voxels = frames * height * width
    flops = conv_flops(vae["latent_channels"], channels[0], voxels)
    flops += 2 * resnet_flops(channels[0], channels[0], voxels) + attention_flops(channels[0], voxels)
    previous = channels[0]
    for i, out in enumerate(channels):
        voxels = frames * height * width
        flops += resnet_flops(previous, out, voxels) + (resnets - 1) * resnet_flops(out, out, voxels)
        grow_space = i < spatial_ups
        grow_time = blocks - 1 - temporal_ups <= i < blocks - 1
        if grow_space or grow_time:
            frames = 2 * frames - 1 if grow_time else frames
            height, width = (2 * height, 2 * width) if grow_space else (height, width)
            flops += conv_flops(out, out, frames * height * width)
        previous = out
    return flops + conv_flops(channels[-1], vae.get("out_channels", 3), frames * height * width)


def decode_flops(vae: dict, height: int, width: int, frames: int, tiled: bool) -> float:
    from .vae_memory import decode_passes

    t, s = vae["temporal_compression_ratio"], vae["spatial_compression_ratio"]
    latent_frames, lh, lw = (frames - 1) // t + 1, height // s, width // s
    per_pass, passes = decode_passes(vae, latent_frames)
    flops = passes * pass_flops(vae, per_pass, lh, lw)
    if tiled:
        flops *= tile_factor(height) * tile_factor(width)
    return flops


def vae_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    return decode_flops(model.vae, height, width, frames, tiled)


def decode_peak_bytes(model: ModelSpec, shape: Shape, tiled: bool) -> float:
    import torch

    from .vae_memory import predict_decode_peak_bytes

    s = model.compression[1]
    lt, lh, lw = model.latent_shape(shape.height, shape.width, shape.frames)
    if tiled:
        lh, lw = min(lh, 256 // s), min(lw, 256 // s)
    return predict_decode_peak_bytes(model.vae, (1, model.latent_channels, lt, lh, lw), torch.bfloat16)


class PassesAndTiles(Unsplit):
    """A decode split into diffusers' temporal passes x spatial tiles (tiled), handed out whole: the
    slowest rank decodes ceil(units / N) of them (a 129-frame video has 11 passes: 3 of 11 on 4
    ranks, 0.27 of the time, not 0.25). The predictor already counts the held outputs and units
    run one at a time on one rank too: the same peak (conservative off the lead)."""

    def units(self, model: ModelSpec, shape: Shape, tiled: bool) -> int:
        from .vae_memory import decode_passes

        lt = model.latent_shape(shape.height, shape.width, shape.frames)[0]
        passes = decode_passes(model.vae, lt)[1]
        if not tiled:
            return passes
        tiles = [1 if pixels <= TILE else math.ceil(pixels / TILE_STRIDE) for pixels in (shape.height, shape.width)]
        return passes * tiles[0] * tiles[1]


PASSES_AND_TILES = PassesAndTiles()
