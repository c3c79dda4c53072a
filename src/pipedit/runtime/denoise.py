"""pipedit's denoising loop: scheduler steps over an adapter's noise predictions.

A DenoiseJob holds one request's loop state so that the engine advances it step by step on
every denoise rank (progress events, Aco decisions per step, interleaving with decodes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..adapter import ModelAdapter
from ..request import VideoRequest


@dataclass
class DenoiseJob:
    request: VideoRequest
    cond: dict[str, torch.Tensor]
    scheduler: Any
    timesteps: torch.Tensor
    latents: torch.Tensor
    predict: Callable[..., torch.Tensor]  # adapter.predict_noise, or a CFG-parallel predictor
    steps_done: int = 0

    @classmethod
    def start(cls, adapter: ModelAdapter, request: VideoRequest, cond: dict[str, torch.Tensor],
              predict: Callable[..., torch.Tensor] | None = None) -> "DenoiseJob":
        scheduler, timesteps = adapter.make_scheduler(request.steps)
        latents = adapter.prepare_latents(request.shape, request.generator())
        return cls(request, cond, scheduler, timesteps, latents, predict or adapter.predict_noise)

    @property
    def total_steps(self) -> int:
        return len(self.timesteps)

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.total_steps

    @torch.no_grad()
    def step(self, adapter: ModelAdapter) -> None:
        timestep = self.timesteps[self.steps_done]
        noise = self.predict(self.latents, timestep, self.cond, self.request.guidance_scale)
        self.latents = self.scheduler.step(noise, timestep, self.latents, return_dict=False)[0]
        self.steps_done += 1
