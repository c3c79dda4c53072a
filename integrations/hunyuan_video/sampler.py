"""The sampling schedule both HunyuanVideo pipelines use (HunyuanVideoPipeline and
HunyuanVideo15Pipeline): the checkpoint's flow-match scheduler, fresh per request with the
request's shift if it sets one, its sigmas set linearly from 1 down to 1/steps (the last one,
0, dropped), as the pipelines pass them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pipedit.sampling import SamplingParams, scheduler_for


def make_scheduler(template, sampling: SamplingParams, device) -> tuple[Any, torch.Tensor]:
    scheduler = scheduler_for(template, sampling)
    sigmas = np.linspace(1.0, 0.0, sampling.steps + 1)[:-1]
    scheduler.set_timesteps(sigmas=sigmas, device=device)
    scheduler.set_begin_index(0)
    return scheduler, scheduler.timesteps
