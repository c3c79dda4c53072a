"""Image-to-video conditioning on the text rank, as diffusers' HunyuanVideo15ImageToVideoPipeline
computes it for an image already at the video's size:
- the image resized to cover the video's size and centre-cropped (resize_mode "crop");
- its VAE latents (argmax) times the VAE's scaling_factor: the first latent frame of the
  condition channels, the other frames zeros; one mask channel, ones on the first frame;
- SigLIP's last hidden states of the image as its image processor prepares it (the image tokens
  the DiT attends to besides the text).
The pipeline picks the video size itself (the bucket of `target_size` nearest the image's aspect);
pipedit takes the request's size, so a request at that bucket equals the pipeline's output.
"""

from __future__ import annotations

import torch

from pipedit.adapter import VideoShape

SIGLIP_TOKENS = 729  # the released SigLIP's 27 x 27 patches at 384 px (the pipelines' vision_num_semantic_tokens)


def video_processor(spatial_ratio: int):
    from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

    return HunyuanVideo15ImageProcessor(vae_scale_factor=spatial_ratio, do_resize=False, do_convert_rgb=True)


def fitted_image(image, shape: VideoShape, spatial_ratio: int):
    """The RGB PIL image resized and cropped to the video's size."""
    return video_processor(spatial_ratio).resize(image, height=shape.height, width=shape.width, resize_mode="crop")


def bucket_size(image_size: tuple[int, int], target_size: int, spatial_ratio: int) -> tuple[int, int]:
    """(height, width) the diffusers pipeline generates for an image of (width, height) `image_size`."""
    width, height = image_size
    return video_processor(spatial_ratio).calculate_default_height_width(height=height, width=width,
                                                                         target_size=target_size)


def image_pixels(image, shape: VideoShape, spatial_ratio: int) -> torch.Tensor:
    """[1, 3, 1, H, W] float32 in [-1, 1]: the fitted image as the VAE encodes it."""
    pixels = video_processor(spatial_ratio).preprocess(fitted_image(image, shape, spatial_ratio),
                                                       height=shape.height, width=shape.width)
    return pixels[:, :, None]


@torch.no_grad()
def condition_latents(vae, image, shape: VideoShape, latent_frames: int, spatial_ratio: int) -> torch.Tensor:
    """[1, latent_channels + 1, T, h, w] float32: the first frame's scaled latents then zeros, and
    the mask channel."""
    vae_device = next(vae.parameters()).device
    first = vae.encode(image_pixels(image, shape, spatial_ratio).to(vae_device, vae.dtype)).latent_dist.mode()
    first = (first * vae.config.scaling_factor).float()
    latents = first.new_zeros(1, first.shape[1], latent_frames, *first.shape[3:])
    latents[:, :, :1] = first
    mask = latents.new_zeros(1, 1, *latents.shape[2:])
    mask[:, :, 0] = 1.0
    return torch.cat([latents, mask], dim=1)


@torch.no_grad()
def siglip_states(feature_extractor, image_encoder, image, shape: VideoShape, spatial_ratio: int) -> torch.Tensor:
    """[1, tokens, image_dim]: SigLIP's last hidden states of the fitted image."""
    inputs = feature_extractor.preprocess(images=fitted_image(image, shape, spatial_ratio), do_resize=True,
                                          return_tensors="pt", do_convert_rgb=True)
    parameter = next(image_encoder.parameters())
    inputs = inputs.to(device=parameter.device, dtype=parameter.dtype)
    return image_encoder(**inputs).last_hidden_state
