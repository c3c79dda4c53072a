"""Image-to-video conditioning on the text rank, as diffusers' WanImageToVideoPipeline computes it:
- Wan2.1 I2V only: the CLIP image embedding (the vision model's second-to-last hidden states of the
  image as its CLIPImageProcessor prepares it);
- every I2V checkpoint: the condition channels concatenated to the latents at each model input:
  a first-frame mask (temporal-ratio channels, ones on the first latent frame) followed by the VAE
  latents (argmax, normalised by latents_mean/latents_std) of the video [image resized to the
  request's size, then num_frames - 1 black frames];
- Wan2.2 TI2V-5B (expand_timesteps) instead: the normalised VAE latents of the resized image
  alone, one latent frame, which replace the first latent frame (first_frame_mask).
They go to the denoise ranks as host tensors inside the condition dict.
"""

from __future__ import annotations

import torch

from pipedit.adapter import VideoShape


@torch.no_grad()
def clip_image_embeds(image_processor, image_encoder, image) -> torch.Tensor:
    pixels = image_processor(images=image, return_tensors="pt")["pixel_values"]
    encoder_device = next(image_encoder.parameters()).device
    out = image_encoder(pixel_values=pixels.to(encoder_device), output_hidden_states=True)
    return out.hidden_states[-2]


def first_frame_video(image, shape: VideoShape, spatial_ratio: int, frames: int) -> torch.Tensor:
    """[1, 3, frames, H, W] float32 in [-1, 1]: the image resized by diffusers' video processor
    (the reference's exact resize), then zeros."""
    from diffusers.video_processor import VideoProcessor

    frame = VideoProcessor(vae_scale_factor=spatial_ratio).preprocess(image, height=shape.height,
                                                                      width=shape.width).to(torch.float32)
    rest = frame.new_zeros(1, 3, frames - 1, shape.height, shape.width)
    return torch.cat([frame[:, :, None], rest], dim=2)


@torch.no_grad()
def normalised_latents(vae, video: torch.Tensor) -> torch.Tensor:
    """The VAE's argmax latents, float32, (x - latents_mean) * (1 / latents_std) as the reference."""
    vae_device = next(vae.parameters()).device
    latents = vae.encode(video.to(vae_device, vae.dtype)).latent_dist.mode().float()
    view = (1, vae.config.z_dim, 1, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(view).to(latents.device)
    inverse_std = 1.0 / torch.tensor(vae.config.latents_std).view(view).to(latents.device)
    return (latents - mean) * inverse_std


def first_frame_latents(vae, image, shape: VideoShape, spatial_ratio: int) -> torch.Tensor:
    """TI2V: [1, z_dim, 1, h, w] float32, the image alone encoded."""
    return normalised_latents(vae, first_frame_video(image, shape, spatial_ratio, frames=1))


def condition_channels(vae, image, shape: VideoShape, temporal_ratio: int, spatial_ratio: int) -> torch.Tensor:
    """[1, temporal_ratio + z_dim, T, h, w] float32: the first-frame mask, then the normalised
    first-frame latents."""
    latents = normalised_latents(vae, first_frame_video(image, shape, spatial_ratio, shape.num_frames))
    mask = latents.new_zeros(1, temporal_ratio, *latents.shape[2:])
    mask[:, :, 0] = 1  # the first latent frame is given, the others are generated
    return torch.cat([mask, latents], dim=1)
