"""Achieved TFLOP/s next to a bench's times: FLOPs counted by the planner's cost model
(pipedit.planner.cost), divided by the measured seconds, and compared with the matmul rate
measured on the bench's device in the same run (pipedit.device_time.measure_matmul_rate).

A figure above the measured matmul rate cannot be real (no transformer runs faster than its own
GEMMs at their best): it says the time did not cover the device work, and is flagged as a
measurement error instead of printed as a rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..device_time import MatmulRate
from ..planner.cost import Shape, step_work
from ..planner.models import ModelSpec


@dataclass(frozen=True)
class Rate:
    flops_per_s: float
    of_matmul: float  # fraction of the measured matmul rate

    @property
    def impossible(self) -> bool:
        return self.of_matmul > 1.0

    def text(self) -> str:
        if self.impossible:
            return (f"MEASUREMENT ERROR: {self.flops_per_s / 1e12:.1f} TFLOP/s is {self.of_matmul:.2f}x the measured "
                    f"matmul rate (the time does not cover the device work)")
        return f"{self.flops_per_s / 1e12:.2f} TFLOP/s, {self.of_matmul:.0%} of matmul"

    def figures(self) -> dict:
        """For JSON reports: tflops and of_matmul, or measurement_error."""
        if self.impossible:
            return {"measurement_error": self.text()}
        return {"tflops": self.flops_per_s / 1e12, "of_matmul": self.of_matmul}


def achieved(flops: float, seconds: float, matmul: MatmulRate) -> Rate:
    per_s = flops / seconds if seconds > 0 else float("inf")
    return Rate(per_s, per_s / matmul.flops_per_s)


def step_flops(model: ModelSpec, height: int, width: int, frames: int, branches: float = 1.0) -> float:
    """DiT FLOPs of one denoising step of a request: the cost model's count for one forward times
    the guidance branches it ran (a request's `cfg_branches` timing)."""
    work = step_work(replace(model, cfg_batch=1), Shape(height, width, frames))
    return (work.linear_flops + work.attention_flops) * branches
