"""LTX-2's scheduler per request, as LTX2Pipeline sets it: flow-matching Euler over the sigmas
linspace(1, 1/n, n), shifted by the checkpoint's dynamic shift, whose mu follows the video's token
count (linear between base_shift at base_image_seq_len and max_shift at max_image_seq_len tokens).
A request's flow_shift replaces the dynamic shift with that fixed shift (the form few-step
distilled checkpoints name). The pipeline steps the audio latents with a copy of the same
scheduler: the step is elementwise, so one scheduler over the joint latents steps both alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pipedit.sampling import SamplingParams


def dynamic_shift_mu(config, video_tokens: int) -> float:
    base_len, max_len = config.get("base_image_seq_len", 1024), config.get("max_image_seq_len", 4096)
    base, top = config.get("base_shift", 0.95), config.get("max_shift", 2.05)
    slope = (top - base) / (max_len - base_len)
    return video_tokens * slope + (base - slope * base_len)


def shift_settable(config) -> bool:
    """A request may set flow_shift: the checkpoint's scheduler is flow-matching Euler (dynamic or fixed shift)."""
    return "shift" in config


def make_scheduler(template, sampling: SamplingParams, device, video_tokens: int) -> tuple[Any, torch.Tensor]:
    steps = sampling.steps
    sigmas = np.linspace(1.0, 1 / steps, steps)
    config = template.config
    if sampling.flow_shift is not None:
        scheduler = type(template).from_config(config, use_dynamic_shifting=False, shift=sampling.flow_shift)
        scheduler.set_timesteps(sigmas=sigmas, device=device)
    else:
        scheduler = type(template).from_config(config)
        extra = {"mu": dynamic_shift_mu(config, video_tokens)} if config.get("use_dynamic_shifting") else {}
        scheduler.set_timesteps(sigmas=sigmas, device=device, **extra)
    scheduler.set_begin_index(0)
    return scheduler, scheduler.timesteps
