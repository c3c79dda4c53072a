"""pipedit's denoising loop: scheduler steps over an adapter's noise predictions.

A DenoiseJob holds one request's loop state so that the engine advances it step by step on
every denoise rank (progress events, Aco decisions per step, interleaving with decodes).

Guidance: the scale of a step is the adapter's `guidance_scale_at(request, timestep)` (by
default the request's guidance_scale; Wan2.2 A14B: guidance_scale_2 for the low-noise expert);
predict_noise and CFG parallel's predictor both receive that per-step scale. After the last step
the adapter's `finish_latents(latents, cond)` gets the final say (by default unchanged; Wan2.2
TI2V: the image's latents put back in the first frame, as the reference pipeline does). Both are
pipedit.model_hooks.AdapterHooks hooks.

Reproducibility: one CPU generator per request draws the initial noise and then whatever the
scheduler draws in its steps (an ancestral sampler's noise, after each model call). Every rank
holds the same generator, so all ranks draw the same noise whatever the parallel degree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..adapter import ModelAdapter
from ..errors import NonFiniteLatents
from ..guidance import branch_passes
from ..request import VideoRequest
from ..sampling import SamplingParams


@dataclass
class DenoiseJob:
    request: VideoRequest
    cond: dict[str, torch.Tensor]
    scheduler: Any
    timesteps: torch.Tensor
    latents: torch.Tensor
    predict: Callable[..., torch.Tensor]  # adapter.predict_noise, or a CFG-parallel predictor
    generator: torch.Generator | None = None
    steps_done: int = 0
    cache: Any = None  # this request's step-cache state (pipedit.cache.state.CacheState); None: uncached
    branch_passes: int = 0  # guidance branches the steps so far ran (pipedit.guidance.branch_passes)

    @classmethod
    def start(cls, adapter: ModelAdapter, request: VideoRequest, cond: dict[str, torch.Tensor],
              predict: Callable[..., torch.Tensor] | None = None) -> "DenoiseJob":
        scheduler, timesteps = adapter.make_scheduler(SamplingParams.of(request))
        generator = request.generator()
        latents = adapter.prepare_latents(request.shape, generator)
        if hasattr(scheduler, "init_noise_sigma"):  # diffusers' convention (e.g. Euler: sigmas.max())
            latents = latents * scheduler.init_noise_sigma
        return cls(request, cond, scheduler, timesteps, latents, predict or adapter.predict_noise, generator)

    @property
    def total_steps(self) -> int:
        return len(self.timesteps)

    @property
    def branches_per_step(self) -> float:
        """Guidance branches per step run so far: 2 with guidance at every step, 1 without (one
        pass: guidance_scale <= 1, or a model without CFG branches); 0 before the first step."""
        return self.branch_passes / self.steps_done if self.steps_done else 0.0

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.total_steps

    @torch.no_grad()
    def step(self, adapter: ModelAdapter) -> None:
        timestep = self.timesteps[self.steps_done]
        model_input = self.latents
        if hasattr(self.scheduler, "scale_model_input"):  # e.g. Euler: x / sqrt(sigma^2 + 1)
            model_input = self.scheduler.scale_model_input(self.latents, timestep)
        scale = adapter.guidance_scale_at(self.request, timestep)
        noise = self.predict(model_input, timestep, self.cond, scale)
        self.branch_passes += branch_passes(adapter, self.cond, scale)
        self.latents = self.scheduler.step(noise, timestep, self.latents, generator=self.generator,
                                           return_dict=False)[0]
        self.steps_done += 1
        if self.finished:  # e.g. Wan2.2 TI2V's given first frame
            self.latents = adapter.finish_latents(self.latents, self.cond)
            check_finite(self.latents, self.total_steps)


def check_finite(latents: torch.Tensor, steps: int) -> None:
    """NonFiniteLatents when the denoised latents hold NaN or infinity. Checked once, after the
    last step (one device sync per request). Every denoise rank holds the same latents, so every
    rank raises here alike and none is left waiting in a collective. A dry run's fake tensors (a
    subclass) hold no values: not checked."""
    if type(latents) is torch.Tensor and not bool(torch.isfinite(latents).all()):
        raise NonFiniteLatents(
            f"the latents hold NaN or infinity after {steps} denoising steps, so there is no video to decode "
            f"(values this far out overflow: lower LoRA scales, flow_shift or guidance closer to the model's own)")
