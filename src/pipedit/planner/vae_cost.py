"""VAE decode FLOPs, walked from the decoder's architecture (convolutions dominate).

HunyuanVideo's causal 3D VAE (diffusers AutoencoderKLHunyuanVideo): conv_in, a mid block (two
resnets and single-head attention over a pass's latent tokens), up blocks of
layers_per_block + 1 resnets with 3x3x3 convolutions, upsamplers that double space and/or time,
conv_out. diffusers decodes long videos in overlapping framewise passes (vae_memory.decode_passes)
and, tiled, in overlapping 256-pixel spatial tiles (stride 192).
OpenSoraPlan's WFVAE decoder: the structure in the facts sheet (§3), with its wavelet branches.
Wan's causal VAE: pipedit.planner.wan_vae.
"""

from __future__ import annotations

import math

from .. import families
from .models import ModelSpec

K3 = 27  # 3x3x3 kernel taps
TILE, TILE_STRIDE = 256, 192  # diffusers' spatial tile and stride, in pixels


def _conv(cin: int, cout: int, voxels: int, taps: int = K3) -> float:
    return 2.0 * taps * cin * cout * voxels


def _resnet(cin: int, cout: int, voxels: int) -> float:
    shortcut = _conv(cin, cout, voxels, 1) if cin != cout else 0.0
    return _conv(cin, cout, voxels) + _conv(cout, cout, voxels) + shortcut


def _attention(channels: int, tokens: int, groups: int = 1) -> float:
    """Single-head attention over `tokens` (per group) plus its four 1x1 projections."""
    return groups * (4.0 * tokens * tokens * channels + 4 * 2.0 * channels * channels * tokens)


def hunyuan_pass_flops(vae: dict, frames: int, height: int, width: int) -> float:
    """One decoder pass over latents of (frames, height, width)."""
    channels = list(reversed(vae["block_out_channels"]))
    blocks = len(channels)
    spatial_ups = int(math.log2(vae["spatial_compression_ratio"]))
    temporal_ups = int(math.log2(vae["temporal_compression_ratio"]))
    resnets = vae["layers_per_block"] + 1
    voxels = frames * height * width
    flops = _conv(vae["latent_channels"], channels[0], voxels)
    flops += 2 * _resnet(channels[0], channels[0], voxels) + _attention(channels[0], voxels)
    previous = channels[0]
    for i, out in enumerate(channels):
        voxels = frames * height * width
        flops += _resnet(previous, out, voxels) + (resnets - 1) * _resnet(out, out, voxels)
        grow_space = i < spatial_ups
        grow_time = blocks - 1 - temporal_ups <= i < blocks - 1
        if grow_space or grow_time:
            frames = 2 * frames - 1 if grow_time else frames
            height, width = (2 * height, 2 * width) if grow_space else (height, width)
            flops += _conv(out, out, frames * height * width)
        previous = out
    return flops + _conv(channels[-1], vae.get("out_channels", 3), frames * height * width)


def _tile_factor(pixels: int) -> float:
    """Pixels decoded per output pixel along one side when tiled."""
    if pixels <= TILE:
        return 1.0
    tiles = math.ceil((pixels - TILE) / TILE_STRIDE) + 1
    return tiles * TILE / pixels


def hunyuan_decode_flops(vae: dict, height: int, width: int, frames: int, tiled: bool) -> float:
    from pipedit.integrations.hunyuan_video.vae_memory import decode_passes

    t, s = vae["temporal_compression_ratio"], vae["spatial_compression_ratio"]
    latent_frames, lh, lw = (frames - 1) // t + 1, height // s, width // s
    per_pass, passes = decode_passes(vae, latent_frames)
    flops = passes * hunyuan_pass_flops(vae, per_pass, lh, lw)
    if tiled:
        flops *= _tile_factor(height) * _tile_factor(width)
    return flops


def wfvae_decode_flops(vae: dict, height: int, width: int, frames: int, tiled: bool) -> float:
    t, s = vae["temporal_compression_ratio"], vae["spatial_compression_ratio"]
    lt, lh, lw = (frames - 1) // t + 1, height // s, width // s
    base = vae["base_channels"]
    c, e, k = 4 * base, vae["decoder_energy_flow_hidden_size"], vae["connect_res_layer_num"]  # 512 released
    v0 = lt * lh * lw
    v1 = (2 * lt - 1) * 4 * lh * lw
    v2 = (2 * lt - 1) * 16 * lh * lw
    flops = _conv(vae["latent_channels"], c, v0)
    flops += _resnet(c, c, v0) + _attention(c, lh * lw, lt) + _resnet(c, c + e, v0)
    flops += k * _resnet(e, e, v0) + _conv(e, 24, v0, 9)  # connect_l2
    flops += 2 * _resnet(c, c, v0) + _conv(c, c, v1) + _resnet(c, c + e, v1)  # up2
    flops += k * _resnet(e, e, v1) + _conv(e, 12, v1, 9)  # connect_l1
    flops += _resnet(c, 2 * base, v1) + _resnet(2 * base, 2 * base, v1)  # up1
    flops += _conv(2 * base, 2 * base, v2, 9) + _resnet(2 * base, 2 * base, v2)
    flops += _resnet(2 * base, base, v2) + _resnet(base, base, v2) + _conv(base, 24, v2, 9)
    # Temporal chunks of 2 latent frames overlapping by one: 1.5x the work.
    return flops * (1.5 if tiled else 1.0)


def vae_decode_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    return families.load(families.family(model.family).planner.vae_flops)(model, height, width, frames, tiled)


def hunyuan_video_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    return hunyuan_decode_flops(model.vae, height, width, frames, tiled)


def opensora_plan_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    return wfvae_decode_flops(model.vae, height, width, frames, tiled)


def wan_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    """Untiled only (pipedit's wan adapter decodes as WanPipeline does)."""
    from .wan_vae import decode_flops

    return decode_flops(model.vae, *model.latent_shape(height, width, frames))
