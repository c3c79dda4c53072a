"""The peak memory of a HunyuanVideo 1.5 VAE decode (AutoencoderKLHunyuanVideo15), for auto tiling
and the planner.

The decoder runs over the whole video at once (no framewise passes). Two terms dominate:
- the largest activation, an up block's output (channels x frames x height x width; for the
  released config 128 channels at full resolution, all frames), held a few times at once as in
  HunyuanVideo's decoder: HunyuanVideo's calibrated ACTIVATION_FACTOR (hunyuan_video/vae_memory.py)
  is reused for it (not calibrated on this VAE);
- the mid block's attention mask: a dense N x N causal mask over every latent token of the decode
  (or of one tile), in the VAE's dtype.
Tiled (the VAE's spatial tiling), one tile of 256 pixels (16 latents at 16x) with all frames.
"""

from __future__ import annotations

import torch

from pipedit.integrations.hunyuan_video.vae_memory import ACTIVATION_FACTOR

TILE_PIXELS = 256  # AutoencoderKLHunyuanVideo15.tile_sample_min_height / width


def tile_latent_shape(vae_config: dict, latent_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The latent shape one tile of a tiled decode covers (the whole shape when it fits one tile)."""
    side = TILE_PIXELS // int(vae_config["spatial_compression_ratio"])
    *lead, height, width = latent_shape
    return (*lead, min(height, side), min(width, side))


def _largest_activation(vae_config: dict, frames: int, height: int, width: int) -> int:
    channels = list(reversed(vae_config["block_out_channels"]))
    spatial_ups = int(vae_config["spatial_compression_ratio"]).bit_length() - 1
    temporal_ups = int(vae_config["temporal_compression_ratio"]).bit_length() - 1
    largest = 0
    for i, out in enumerate(channels):
        if i < spatial_ups:
            height, width = 2 * height, 2 * width
        if len(channels) - 1 - temporal_ups <= i < len(channels) - 1:
            frames = 2 * frames - 1
        largest = max(largest, out * frames * height * width)
    return largest


def predict_decode_peak_bytes(vae_config: dict, latent_shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Peak bytes of an untiled decode of latents [B, C, T, h, w] in `dtype`."""
    batch, _, frames, height, width = latent_shape
    tokens = frames * height * width
    size = dtype.itemsize
    return int(batch * (ACTIVATION_FACTOR * _largest_activation(vae_config, frames, height, width) + tokens ** 2)
               * size)


def predict_tiled_peak_bytes(vae_config: dict, latent_shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return predict_decode_peak_bytes(vae_config, tile_latent_shape(vae_config, latent_shape), dtype)
