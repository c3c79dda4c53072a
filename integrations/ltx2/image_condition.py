"""LTX-2 image-to-video's first-frame condition, as LTX2ImageToVideoPipeline prepares it.

The image is re-encoded as one H.264 frame at the checkpoint's CRF (33 for the Gemma 3 generations,
LTX-2 and 2.3: the compression the model was trained on; PyAV does it, through diffusers' helper),
resized (bilinear) and normalised to [-1, 1] by the pipeline's video processor, and encoded by the video VAE
with the latent distribution's mode; the latents are normalised per channel (mean, std). The first
latent frame's tokens keep these latents at every step (timestep 0) and the rest is denoised.
"""

from __future__ import annotations

import numpy as np
import PIL.Image
import torch
from diffusers.pipelines.ltx2.utils import apply_image_conditioning_crf, resolve_default_image_crf
from diffusers.video_processor import VideoProcessor


@torch.no_grad()
def first_frame_latents(vae, text_encoder_config, image: PIL.Image.Image, height: int, width: int,
                        spatial_ratio: int) -> torch.Tensor:
    """-> normalised latents [1, C, 1, h, w] of `image` at the video's size (float32)."""
    crf = resolve_default_image_crf(_ConfigOnly(text_encoder_config))
    if crf:
        image = PIL.Image.fromarray(apply_image_conditioning_crf(np.array(image.convert("RGB")), crf))
    pixels = VideoProcessor(vae_scale_factor=spatial_ratio, resample="bilinear").preprocess(image, height=height, width=width)
    pixels = pixels.to(vae.device, vae.dtype)
    latents = vae.encode(pixels.unsqueeze(2)).latent_dist.mode().float()  # [1, C, 1, h, w]
    view = (1, -1, 1, 1, 1)
    mean = vae.latents_mean.view(view).to(latents.device, latents.dtype)
    std = vae.latents_std.view(view).to(latents.device, latents.dtype)
    return (latents - mean) * 1.0 / std


class _ConfigOnly:
    """What resolve_default_image_crf reads of a text encoder (its config's model_type), so the
    text rank decides the CRF from the config without passing the model around."""

    def __init__(self, config) -> None:
        self.config = config
