"""The official Open-Sora-Plan v1.3 sampler: diffusers' EulerAncestralDiscreteScheduler with
v-prediction, zero-terminal-SNR betas and trailing timesteps (default linear betas 1e-4..0.02
over 1000 steps). With its timesteps set, init_noise_sigma is sigmas.max(): sigma(t=999) =
sqrt(2^24 - 1) (alphas_cumprod[-1] = 2^-24) for up to 250 steps (500 and 1000 steps reach t=997/998,
larger). In float32 that is 4096.0 on some CPUs and 4095.99976 on others (the exact value lies a hair
from the midpoint of the two), so nothing may assume either bit pattern."""

from __future__ import annotations

import torch
from diffusers import EulerAncestralDiscreteScheduler

from pipedit.sampling import SamplingParams

SCHEDULER_CONFIG = {
    "prediction_type": "v_prediction",
    "rescale_betas_zero_snr": True,
    "timestep_spacing": "trailing",
}


def make_scheduler(sampling: SamplingParams | None = None, device=None) -> EulerAncestralDiscreteScheduler:
    """The official sampler; with `sampling`, its timesteps set for sampling.steps."""
    scheduler = EulerAncestralDiscreteScheduler(**SCHEDULER_CONFIG)
    if sampling is not None:
        scheduler.set_timesteps(sampling.steps, device=device)
    return scheduler


def initial_noise(shape: tuple[int, ...], generator: torch.Generator, device) -> torch.Tensor:
    """Unit randn from the request's CPU generator (its first draw); the denoising job scales it
    by the scheduler's init_noise_sigma."""
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(device)
