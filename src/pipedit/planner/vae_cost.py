"""VAE decode FLOPs, walked from a decoder's architecture (convolutions dominate): the shared
counts of convolutions, resnets and attention, and diffusers' spatial tiling. Each family's planner
module walks its own decoder with them (its pipedit.families entry's planner.vae_flops)."""

from __future__ import annotations

import math

from .. import families
from .models import ModelSpec

K3 = 27  # 3x3x3 kernel taps
TILE, TILE_STRIDE = 256, 192  # diffusers' spatial tile and stride, in pixels


def conv_flops(cin: int, cout: int, voxels: int, taps: int = K3) -> float:
    return 2.0 * taps * cin * cout * voxels


def resnet_flops(cin: int, cout: int, voxels: int) -> float:
    shortcut = conv_flops(cin, cout, voxels, 1) if cin != cout else 0.0
    return conv_flops(cin, cout, voxels) + conv_flops(cout, cout, voxels) + shortcut


def attention_flops(channels: int, tokens: int, groups: int = 1) -> float:
    """Single-head attention over `tokens` (per group) plus its four 1x1 projections."""
    return groups * (4.0 * tokens * tokens * channels + 4 * 2.0 * channels * channels * tokens)


def tile_factor(pixels: int) -> float:
    """Pixels decoded per output pixel along one side when tiled."""
    if pixels <= TILE:
        return 1.0
    tiles = math.ceil((pixels - TILE) / TILE_STRIDE) + 1
    return tiles * TILE / pixels


def vae_decode_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    return families.load(families.family(model.family).planner.vae_flops)(model, height, width, frames, tiled)
