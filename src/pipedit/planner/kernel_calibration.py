"""Measured kernel efficiencies for the cost model: `pipedit bench kernels --write-calibration FILE`
writes what one transformer block and its attention call took on a GPU; `pipedit plan
--calibration FILE` plans with the efficiencies that reproduce those times, so its predictions
follow the kernels actually installed (a faster attention kernel lowers every prediction).

The file (JSON, written by pipedit.bench.kernels) names the device it was measured on
(`gpu_name`: the driver's name, null on a CPU), the kernel and precision whose rows it holds (the
fastest measured) and, per row, the block's counted work (pipedit.planner.cost.block_work) with
the measured `block_s` and `attention_s` (the self-attention call alone).

From the rows, summed: eff_attention = self-attention FLOPs / (attention_s x peak); the rest of the
block's time, less what the profile predicts for its elementwise passes, cross-attention and
launches, sets eff_matmul = linear FLOPs / (that rest x peak). The profile's other figures stay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import UserInputError
from .cost import StepWork
from .hardware import GpuProfile, profile_for_gpu_name

FORMAT = "pipedit-kernel-calibration/1"
ROW_FIELDS = ("linear_flops", "self_attention_flops", "cross_attention_flops", "elementwise_bytes", "block_s",
              "attention_s")
# The linear GEMMs keep at least this share of a block's non-attention time, whatever the
# profile predicts for the elementwise passes (a profile far off the machine must not solve to ~0).
MIN_LINEAR_SHARE = 0.1


@dataclass(frozen=True)
class KernelCalibration:
    gpu_name: str | None
    kernel: str
    precision: str
    rows: tuple[dict, ...]
    source: str = ""

    def describe(self) -> str:
        where = self.gpu_name or "a CPU"
        return f"{self.kernel} attention, {self.precision}, measured on {where}"


def read_calibration(path: str | Path) -> KernelCalibration:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UserInputError(f"--calibration {path}: cannot read it as JSON ({error}); write one with "
                             f"`pipedit bench kernels --write-calibration FILE`") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserInputError(f"--calibration {path}: not a kernel calibration (expected format {FORMAT!r}, "
                             f"as `pipedit bench kernels --write-calibration` writes)")
    rows = data.get("rows") or []
    good = [row for row in rows if isinstance(row, dict) and all(isinstance(row.get(f), (int, float)) for f in ROW_FIELDS)
            and row["block_s"] > row["attention_s"] > 0]
    if not good or len(good) != len(rows):
        raise UserInputError(f"--calibration {path}: every row needs {', '.join(ROW_FIELDS)} as numbers with "
                             f"block_s > attention_s > 0")
    return KernelCalibration(data.get("gpu_name"), str(data.get("kernel")), str(data.get("precision")),
                             tuple(good), str(path))


def check_profile(calibration: KernelCalibration, gpu: str) -> None:
    """A calibration applies to the profile of the GPU it was measured on (a CPU's to --gpu this)."""
    measured = profile_for_gpu_name(calibration.gpu_name) if calibration.gpu_name else "this"
    if measured != gpu:
        found = f"the {measured} profile" if measured else "no profile"
        raise UserInputError(f"--calibration {calibration.source} was measured on {calibration.gpu_name or 'a CPU'} "
                             f"({found}); it cannot calibrate --gpu {gpu}: plan with --gpu {measured or 'of that GPU'}, "
                             f"or measure this GPU with `pipedit bench kernels --write-calibration FILE`")


def calibrated(prof: GpuProfile, calibration: KernelCalibration) -> GpuProfile:
    """`prof` with the matmul and attention efficiencies that reproduce the calibration's rows."""
    total = {name: sum(row[name] for row in calibration.rows) for name in ROW_FIELDS}
    eff_attention = total["self_attention_flops"] / (total["attention_s"] * prof.peak_flops)
    rest_s = total["block_s"] - total["attention_s"]
    others_s = (total["elementwise_bytes"] / (prof.mem_bandwidth * prof.eff_memory)
                + total["cross_attention_flops"] / (prof.peak_flops * eff_attention)
                + len(calibration.rows) * StepWork.kernels_per_layer * prof.launch_s)
    linear_s = max(rest_s - others_s, MIN_LINEAR_SHARE * rest_s)
    eff_matmul = total["linear_flops"] / (linear_s * prof.peak_flops)
    return replace(prof, eff_matmul=eff_matmul, eff_attention=eff_attention,
                   name=f"{prof.name} (calibrated: {calibration.describe()})")
