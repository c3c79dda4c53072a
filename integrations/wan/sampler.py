"""The checkpoint's own scheduler (Wan releases name UniPC multistep with flow prediction; distilled
releases may name another, with another shift), a fresh instance per request with the request's
shift if it sets one, stepped as WanPipeline steps it."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from pipedit.sampling import SamplingParams, scheduler_for


class GeneratorFreeStep:
    """A scheduler whose step() takes no generator (UniPC is deterministic) behind pipedit's loop,
    which passes the request's generator to every step: the generator is dropped, nothing is drawn."""

    def __init__(self, scheduler):
        self.inner = scheduler

    def step(self, model_output, timestep, sample, generator=None, return_dict: bool = True):
        return self.inner.step(model_output, timestep, sample, return_dict=return_dict)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)


def make_scheduler(template, sampling: SamplingParams, device) -> tuple[Any, torch.Tensor]:
    """A new scheduler of the checkpoint's class and config (and the request's shift), timesteps set
    as WanPipeline sets them."""
    scheduler = scheduler_for(template, sampling)
    scheduler.set_timesteps(sampling.steps, device=device)
    scheduler.set_begin_index(0)
    if "generator" not in inspect.signature(scheduler.step).parameters:
        scheduler = GeneratorFreeStep(scheduler)
    return scheduler, scheduler.timesteps
