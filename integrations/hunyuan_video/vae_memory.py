"""How much memory an untiled HunyuanVideo VAE decode needs, and whether to tile it instead.

The prediction, for latents [B, C, T, h, w] decoded as diffusers decodes them by default:

- Framewise passes. diffusers' VAE decodes more than `16 // temporal_ratio` latent frames in
  overlapping passes of `16 // temporal_ratio + 1` latent frames (stride `12 // temporal_ratio`),
  so a pass sees t = min(T, 5) latent frames however long the video is.
- Convolutions. Within a pass the decoder's up blocks grow the resolution: up block i doubles
  height and width while i < log2(spatial_ratio) and doubles the frames after the first while
  n-1-log2(temporal_ratio) <= i < n-1 (n = len(block_out_channels)); block i runs its resnets
  with the larger of its input and output channels. The largest activation L (max over those
  tensors of channels x frames x height x width; for the released config 256 channels x 17
  frames at full resolution) is held a few times at once: the block input kept as residual, the
  norm and activation outputs, the causal padding copy, the convolution output, and at an
  upsampler the interpolated frames and their concatenation. Peak = ACTIVATION_FACTOR * B * L
  * itemsize. layers_per_block adds resnets of the same sizes, run one after another: time, not
  peak.
- Attention mask. The mid block attends over all N = t*h*w latent tokens of a pass with a dense
  [N, N] causal mask built as a bool comparison, a float32 `where` and a cast to the VAE's dtype:
  4 + max(1, itemsize) bytes per entry at its worst moment (5 in float32: no cast copy), plus
  the mid block's own activations. Quadratic in the frame area: at 1088x1920 it outgrows the
  convolutions. Convolutions and mask are never alive together (the mask dies with the mid block).
- Held outputs. Each pass's decoded frames live until the passes are blended and concatenated:
  out_channels x (passes x frames per pass + all frames) x H x W.

predicted = max(convolutions, mask) + held outputs: activations only, the weights and the latents
are resident already when the decision is taken.

Calibration (`pipedit bench vae` measures any checkpoint and shape): untiled decodes of the
released config (random weights, float32, CPU, each in a fresh process, peak resident memory
above the memory before the decode) peaked at 6.36 L at 128x128x9, 5.81 L at 128x256x17,
6.12 L at 256x256x9, 6.62 L at 320x320x9 and 6.44 L at 384x384x9 (held outputs included). That
is consistent with ~4.5 L alive at the last upsampler (its input, interpolated frames, their
concatenation, the causal padding copy with 2 more frames, the output) plus oneDNN's reordered
copies on CPU. ACTIVATION_FACTOR = 7.5 bounds all five by 13-30%. The mask alone at N = 12288
took 722.6 MiB in float32 (predicted 720.0) and 866.4 MiB in bfloat16 (864.0); the demo VAE's
mask-bound decode at 640x640x9 peaked at 1799.5 MiB (predicted 1804.4).
Not calibrated: CUDA (cuDNN may add convolution workspaces; SAFETY_FRACTION leaves room, and a
GPU test checks the bound there). Not a bound for channel-thin toy configs on CPU: the demo's
8-channel VAE took 8.45 L at 320x320x9, and a 64x64x5 decode took 72 MiB for 5 MiB predicted
(fixed per-process costs of the first convolutions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from pipedit.config import VAE_TILING_MODES
from pipedit.errors import UserInputError

ACTIVATION_FACTOR = 7.5
# auto tiles when the prediction exceeds this share of the free memory (fragmentation, workspaces).
SAFETY_FRACTION = 0.9
# diffusers' framewise decoding defaults (AutoencoderKLHunyuanVideo.tile_sample_*_num_frames),
# which pipedit keeps so that untiled results equal diffusers' pipeline.
FRAMEWISE_SAMPLE_FRAMES = 16
FRAMEWISE_SAMPLE_STRIDE = 12


def decode_passes(vae_config: dict, latent_frames: int) -> tuple[int, int]:
    """(latent frames per pass, number of passes) of diffusers' default framewise decoding."""
    ratio = vae_config["temporal_compression_ratio"]
    limit = FRAMEWISE_SAMPLE_FRAMES // ratio
    if latent_frames <= limit:
        return latent_frames, 1
    return limit + 1, math.ceil(latent_frames / (FRAMEWISE_SAMPLE_STRIDE // ratio))


def decoder_activations(vae_config: dict, frames: int, height: int, width: int) -> list[tuple[int, int, int, int]]:
    """(channels, frames, height, width) of the activations one decoder pass creates, in order,
    from the latent grid to the decoded video."""
    channels = list(reversed(vae_config["block_out_channels"]))
    blocks = len(channels)
    spatial_ups = int(math.log2(vae_config["spatial_compression_ratio"]))
    temporal_ups = int(math.log2(vae_config["temporal_compression_ratio"]))
    shapes = [(channels[0], frames, height, width)]  # conv_in and the mid block
    previous = channels[0]
    for i, out in enumerate(channels):
        shapes.append((max(previous, out), frames, height, width))
        grow_space = i < spatial_ups
        grow_time = blocks - 1 - temporal_ups <= i < blocks - 1
        if grow_space or grow_time:
            frames = 2 * frames - 1 if grow_time else frames  # the first frame is not repeated
            height, width = (2 * height, 2 * width) if grow_space else (height, width)
            shapes.append((out, frames, height, width))
        previous = out
    shapes.append((vae_config.get("out_channels", 3), frames, height, width))
    return shapes


def mask_bytes(tokens: int, dtype: torch.dtype) -> int:
    """Peak bytes of the mid block's dense causal attention mask over `tokens` latent tokens."""
    per_entry = 4 + (1 if dtype == torch.float32 else max(1, dtype.itemsize))
    return tokens * tokens * per_entry


def predict_decode_peak_bytes(vae_config: dict, latent_shape: Sequence[int], dtype: torch.dtype) -> int:
    """Upper bound of the activation memory of an untiled decode (see the module docstring)."""
    batch, _, frames, height, width = latent_shape
    per_pass, passes = decode_passes(vae_config, frames)
    shapes = decoder_activations(vae_config, per_pass, height, width)
    size = dtype.itemsize
    convolutions = ACTIVATION_FACTOR * batch * max(math.prod(s) for s in shapes) * size
    mask = 0
    if vae_config.get("mid_block_add_attention", True):
        tokens = per_pass * height * width
        mask = mask_bytes(tokens, dtype) + ACTIVATION_FACTOR * batch * math.prod(shapes[0]) * size
    out_channels, pass_frames, out_height, out_width = shapes[-1]
    video_frames = (frames - 1) * vae_config["temporal_compression_ratio"] + 1
    held_frames = (passes * pass_frames if passes > 1 else 0) + video_frames
    held = batch * out_channels * held_frames * out_height * out_width * size
    return int(max(convolutions, mask) + held)


def free_device_bytes(device: torch.device | str) -> int | None:
    """Memory a new allocation on `device` can use; None off CUDA (no budget is enforced there)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    # The driver counts blocks PyTorch's caching allocator holds as used, yet they are free to us.
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free + cached)


def check_mode(mode: str) -> str:
    if mode not in VAE_TILING_MODES:
        raise UserInputError(f"vae_tiling must be one of {', '.join(VAE_TILING_MODES)}, got {mode!r}")
    return mode


def should_tile(mode: str, device: torch.device | str, predicted: int, free: int | None) -> bool:
    """on: always; off: never; auto: only on CUDA, when the untiled prediction does not fit in
    SAFETY_FRACTION of the free memory. Never on CPU in auto, so CPU results equal diffusers'."""
    if check_mode(mode) != "auto":
        return mode == "on"
    if torch.device(device).type != "cuda" or free is None:
        return False
    return predicted > SAFETY_FRACTION * free
