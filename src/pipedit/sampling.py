"""What a request asks of the sampler: the one value an adapter's make_scheduler(sampling) reads.

Every scheduler is built through that seam, so a sampling parameter added here reaches all
models at once (each adapter decides how its scheduler honours it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    steps: int  # denoising steps (num_inference_steps)

    @classmethod
    def of(cls, request) -> "SamplingParams":
        """The sampling parameters a VideoRequest carries (the one place they are read from it)."""
        return cls(steps=request.steps)
