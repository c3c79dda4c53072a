"""One request's cache: the decision policy, the references, the cached residuals, the record.

Held by the request's DenoiseJob, never by the model: DeDiVAE keeps several requests alive,
and a request must never read another's residuals."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .blocks import Streams
from .spec import CacheSpec


@dataclass
class CacheState:
    spec: CacheSpec
    policy: object  # FirstBlockPolicy or TeaCachePolicy
    total_steps: int
    step: int = 0  # the step the next forward belongs to
    reference: torch.Tensor | None = None  # the signal the next distance is measured against
    head_output: Streams | None = None  # streams the cached residual is measured from (this step)
    residuals: Streams | None = None  # cached residuals of the skipped blocks, every stream
    computing: bool = True  # this step's decision
    forwards_this_step: int = 0
    computed: list[bool] = field(default_factory=list)  # per step: the tail ran (True) or was skipped
    distances: list[float | None] = field(default_factory=list)  # per step: the agreed distance

    def signal_sums(self, signal: torch.Tensor) -> torch.Tensor:
        """Local (sum|signal - reference|, sum|reference|) in float32, as one 2-element tensor."""
        ref = self.reference
        return torch.stack([(signal - ref).abs().sum(dtype=torch.float32), ref.abs().sum(dtype=torch.float32)])

    def finish_step(self) -> None:
        if self.forwards_this_step != 1:
            raise RuntimeError(f"the step cache saw {self.forwards_this_step} transformer forwards in step "
                               f"{self.step}; it supports exactly one per step")
        self.forwards_this_step = 0
        self.step += 1

    def report(self) -> dict[str, float]:
        """What the response's timings carry: transformer evaluations computed and skipped."""
        skipped = self.computed.count(False)
        return {"cache_computed": float(len(self.computed) - skipped), "cache_skipped": float(skipped)}
