"""The attention kernels a device and dtype run, chosen once by measurement, agreed across ranks.

For each form (plain: unmasked calls; lse: Ring blocks and the padded-text split) every exact
kernel of the table (pipedit.attention.kernels.attention_kernels) that is installed and gives the
right result on a small input is timed on one probe call of a real size, with CUDA events after
a warm-up (the time covers the device work). The ranks then agree: every rank contributes one
time per table entry (infinity where it cannot run one), one all-reduce MAX over the SP group
gives each kernel the time of its slowest rank, and every rank picks the lowest of those agreed
times (ties go to the table's earlier entry). All ranks thus run the same kernel, whatever each
would have preferred alone, and the choice adds one collective, issued by every rank, at setup.

A named kernel (model.attention other than auto) is taken as given for the plain form; its LSE
form is used when it has one, else the measured exact LSE kernel. On a CPU nothing is timed: the
reference kernels run (torch SDPA, and its flash op for the LSE form), as before.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from pipedit.attention.autotune import slowest_rank
from pipedit.attention.kernels import KernelChoice, KernelEntry, attention_kernels, kernel_entry
from pipedit.distributed.context import ParallelContext
from pipedit.errors import UserInputError

FORMS = ("plain", "lse")
REFERENCE = "sdpa"
# bfloat16 against float32 math on unit-variance inputs: well above rounding, far below a wrong result.
CHECK_TOLERANCE = 3e-2
_HALF = (torch.float16, torch.bfloat16)

# (form, entry) -> ms per call on this rank, or a string saying why it is no candidate
Measure = Callable[[str, KernelEntry], "float | str"]


@dataclass(frozen=True)
class ProbeShape:
    """One probe call: [1, tokens, heads, head_dim], about one rank's share of a 480p video call."""

    tokens: int = 8192
    heads: int = 8
    head_dim: int = 128


def unavailable(entry: KernelEntry, device_type: str, dtype: torch.dtype) -> str | None:
    """Why `entry` cannot run here (None: it may)."""
    if entry.cuda_only and device_type != "cuda":
        return "needs CUDA"
    if device_type == "cuda" and entry.name != REFERENCE and dtype not in _HALF:
        return f"needs float16 or bfloat16, not {str(dtype).removeprefix('torch.')}"
    if importlib.util.find_spec(entry.module.partition(".")[0]) is None:
        return "not installed"
    return None


def check_kernel_setting(name: str, device_type: str, dtype: torch.dtype | None = None) -> None:
    """Refuses at start a named kernel this machine cannot run (model.attention / --attention)."""
    if name == "auto":
        return
    entry = kernel_entry(name)
    why = unavailable(entry, device_type, dtype or torch.bfloat16)
    if why is not None:
        raise UserInputError(f"model.attention {name} ({entry.about}) cannot run here: {why}"
                             + (f" (pip install {entry.module})" if why == "not installed" else "")
                             + "; use auto (the fastest exact kernel, measured) or sdpa")


def _inputs(shape: ProbeShape, device: torch.device, dtype: torch.dtype, tokens: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, tokens, shape.heads, shape.head_dim, generator=generator).to(device, dtype)
                 for _ in range(3))


def _call(entry: KernelEntry, form: str, q, k, v) -> torch.Tensor:
    if form == "plain":
        return entry.plain()(q, k, v)
    return entry.lse()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))[0].transpose(1, 2)  # type: ignore[misc]


def _wrong(entry: KernelEntry, form: str, device: torch.device, dtype: torch.dtype, shape: ProbeShape) -> str | None:
    """A small call against float32 math: the kernel must be right before it may be fast."""
    q, k, v = _inputs(shape, device, dtype, 64)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * shape.head_dim ** -0.5
    expected = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v.float())
    error = (_call(entry, form, q, k, v).float() - expected).abs().max().item()
    return None if error <= CHECK_TOLERANCE else f"wrong result (max abs diff {error:.3g})"


def device_timer(device: torch.device, dtype: torch.dtype, shape: ProbeShape, rounds: int = 5) -> Measure:
    """Times each candidate on `device`: median ms of `rounds` calls after a warm-up, each call
    between CUDA events that the host waits for (perf_counter on a CPU)."""

    def measure(form: str, entry: KernelEntry) -> float | str:
        try:
            wrong = _wrong(entry, form, device, dtype, shape)
            if wrong is not None:
                return wrong
            q, k, v = _inputs(shape, device, dtype, shape.tokens)
            _call(entry, form, q, k, v)  # warm-up: loads, compiles, picks algorithms
            samples = [_elapsed_ms(lambda: _call(entry, form, q, k, v), device) for _ in range(rounds)]
        except Exception as error:  # noqa: BLE001 - a failing kernel is no candidate, and says why
            lines = str(error).strip().splitlines()
            return f"error: {lines[0] if lines else type(error).__name__}"
        return statistics.median(samples)

    return measure


def _elapsed_ms(call: Callable[[], object], device: torch.device) -> float:
    if device.type != "cuda":
        start = time.perf_counter()
        call()
        return (time.perf_counter() - start) * 1e3
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    call()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def agreed_times(local: dict[str, float | str], ctx: ParallelContext) -> dict[str, float]:
    """Per table entry, the slowest rank's ms (infinity where any rank has no number).
    Collective over ctx.sp_group: every rank calls it with the entries in table order."""
    names = list(local)
    mine = torch.tensor([[local[n] if isinstance(local[n], float) else float("inf") for n in names]],
                        dtype=torch.float64)
    return dict(zip(names, slowest_rank(mine, ctx)[0].tolist()))


def pick_fastest(agreed: dict[str, float]) -> str:
    """The lowest agreed time; ties go to the earlier entry; none measured: the reference."""
    finite = [(ms, i, name) for i, (name, ms) in enumerate(agreed.items()) if ms != float("inf")]
    return min(finite)[2] if finite else REFERENCE


def _measure_form(form: str, ctx: ParallelContext, dtype: torch.dtype, measure: Measure,
                  only: str | None = None) -> tuple[str, dict[str, float | str]]:
    local: dict[str, float | str] = {}
    for entry in attention_kernels():
        if form == "lse" and entry.lse is None:
            continue
        why = unavailable(entry, ctx.device.type, dtype)
        if why is None and not entry.exact and entry.name != only:
            why = "lossy: only when named (model.attention)"
        local[entry.name] = why if why is not None else measure(form, entry)
    return pick_fastest(agreed_times(local, ctx)), local


def choose_kernels(ctx: ParallelContext, dtype: torch.dtype, requested: str = "auto",
                   shape: ProbeShape | None = None, measure: Measure | None = None) -> KernelChoice:
    """The kernels ctx's device runs for `dtype` (see the module docstring). Collective over
    ctx.sp_group when something is measured: every rank of it calls this with the same arguments."""
    device = ctx.device
    if measure is None and device.type != "cuda":
        return KernelChoice(device.type, dtype, REFERENCE if requested == "auto" else requested, REFERENCE,
                            why="CPU: the reference kernels (not timed)")
    measure = measure or device_timer(device, dtype, shape or ProbeShape())
    lse, lse_times = _measure_form("lse", ctx, dtype, measure)
    measured = {"lse": lse_times}
    if requested == "auto":
        plain, measured["plain"] = _measure_form("plain", ctx, dtype, measure)
        why = "measured: fastest exact kernel agreed over the ranks"
    else:
        plain, why = requested, f"named by model.attention ({requested})"
        if kernel_entry(requested).lse is not None:
            lse = requested
    return KernelChoice(device.type, dtype, plain, lse, why=why, measured=measured)


def describe(choice: KernelChoice) -> dict:
    """The choice as plain data, for `pipedit env` and check-node."""
    return {"device": choice.device_type, "dtype": str(choice.dtype).removeprefix("torch."),
            "plain": choice.plain, "lse": choice.lse, "why": choice.why,
            "measured_ms": {form: {name: (round(ms, 4) if isinstance(ms, float) else ms) for name, ms in times.items()}
                            for form, times in choice.measured.items()}}
