"""Achieved TFLOP/s next to a bench's times: FLOPs counted by the planner's cost model
(pipedit.planner.cost), divided by the measured seconds, and compared with the matmul rate
measured on the bench's device in the same run (pipedit.device_time.measure_matmul_rate; for the
benches that run an engine, on its rank 0: RankWorker.matmul_rate, since a driver holds no GPU).

A step's figure is per denoise rank: the step's FLOPs over its seconds, divided by the ranks that
shared it (sequence parallel and CFG parallel ranks; Aco's helper decode ranks are not counted),
so that it compares with one device's matmul rate.

A figure above the measured matmul rate cannot be real (no transformer runs faster than its own
GEMMs at their best): it says the time did not cover the device work, and is flagged as a
measurement error instead of printed as a rate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

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


def achieved(flops: float, seconds: float, matmul: MatmulRate, devices: int = 1) -> Rate:
    """The rate of `flops` done in `seconds` by `devices` devices, per device."""
    per_s = flops / seconds / devices if seconds > 0 else float("inf")
    return Rate(per_s, per_s / matmul.flops_per_s)


def step_flops(model: ModelSpec, height: int, width: int, frames: int, branches: float = 1.0) -> float:
    """DiT FLOPs of one denoising step of a request: the cost model's count for one forward times
    the guidance branches it ran (a request's `cfg_branches` timing)."""
    work = step_work(replace(model, cfg_batch=1), Shape(height, width, frames))
    return (work.linear_flops + work.attention_flops) * branches


@dataclass(frozen=True)
class StepRates:
    """One bench run's DiT and matmul rate: the FLOPs of its steps and the rates of its times."""

    model: ModelSpec
    matmul: MatmulRate

    def step_flops(self, height: int, width: int, frames: int, branches: float) -> float:
        return step_flops(self.model, height, width, frames, branches)

    def figures(self, flops: float, seconds: float | None, devices: int) -> dict | None:
        """For JSON reports: the counted FLOPs, the seconds, the devices that shared them and the
        achieved rate per device (Rate.figures): tflops = flops / seconds / devices / 1e12."""
        if seconds is None:
            return None
        return {"flops": flops, "seconds": seconds, "devices": devices,
                **achieved(flops, seconds, self.matmul, devices).figures()}

    def columns(self, flops: float, seconds: float, devices: int) -> str:
        """TFLOP/s per device and the share of the matmul rate, for a table row (3 significant
        digits: a demo model's CPU figures are small)."""
        rate = achieved(flops, seconds, self.matmul, devices)
        if rate.impossible:
            return f"{'MEAS.ERROR':>10} {rate.of_matmul:>7.2f}x"
        return f"{rate.flops_per_s / 1e12:>10.3g} {rate.of_matmul * 100:>7.3g}%"

    def header(self) -> str:
        """The rate line printed with the figures."""
        text = self.matmul.describe()
        if self.matmul.device.startswith("cpu"):
            text += f" (a CPU's {self.matmul.dtype} figures, not a GPU's)"
        return text + "; TFLOP/s: the cost model's FLOPs over the time, per denoise rank"

    def report(self) -> dict:
        return matmul_report(self.matmul)


def matmul_report(matmul: MatmulRate) -> dict:
    """A JSON report's `matmul`: the rate's fields and its text."""
    return asdict(matmul) | {"text": matmul.describe()}


def markdown_cells(figures: dict | None) -> str:
    """Two Markdown table cells, TFLOP/s and share of the matmul rate, from StepRates.figures."""
    if figures is None:
        return "- | -"
    if "measurement_error" in figures:
        return "MEASUREMENT ERROR | above matmul"
    return f"{figures['tflops']:.3g} | {figures['of_matmul'] * 100:.3g}%"


COLUMNS = f"{'TFLOP/s':>10} {'of mm':>8}"  # the header of StepRates.columns


def model_spec(model_path, model_name: str | None = None) -> ModelSpec:
    """The cost model's spec of the checkpoint a bench runs (its real widths: a demo's too)."""
    from ..families import family_of_checkpoint
    from ..planner.models import from_checkpoint

    return from_checkpoint(model_path, family_of_checkpoint(model_path, model_name).name)


def rank_matmul_rate(executor, rank: int = 0) -> MatmulRate:
    """The matmul rate measured on `rank`'s device (RankWorker.matmul_rate), once per bench run."""
    return MatmulRate(**executor.call_rank(rank, "matmul_rate"))
