"""pipedit's denoising loop: scheduler steps over an adapter's noise predictions."""

from __future__ import annotations

from typing import Callable

import torch

from ..adapter import ModelAdapter
from ..request import VideoRequest

StepCallback = Callable[[int, int], None]  # (steps done, total steps)


@torch.no_grad()
def denoise(adapter: ModelAdapter, request: VideoRequest, cond: dict[str, torch.Tensor],
            on_step: StepCallback | None = None) -> torch.Tensor:
    """Returns the final float32 latents for one request. Deterministic for a given seed."""
    scheduler, timesteps = adapter.make_scheduler(request.steps)
    latents = adapter.prepare_latents(request.shape, request.generator())
    for index, timestep in enumerate(timesteps):
        noise = adapter.predict_noise(latents, timestep, cond, request.guidance_scale)
        latents = scheduler.step(noise, timestep, latents, return_dict=False)[0]
        if on_step is not None:
            on_step(index + 1, len(timesteps))
    return latents
