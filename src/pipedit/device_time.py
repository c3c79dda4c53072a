"""Device time: what every time pipedit reports or acts on waits for, in one place.

A GPU runs kernels asynchronously: a host clock read right after a step's launches measures the
launches, and the device work lands in whatever waits next (a decode's `.cpu()`, say). So every
phase pipedit times (a request's encode, each denoising step, the decode, a timed forward, a
bench's block) ends with `wait_for_device` for the rank's own device before its clock is read,
and `timed` waits at its start too (work queued before is not the phase's).

Invariant: never wait inside a step, between the kernels of one forward: a wait there drains the
launch queue (the host stops running ahead of the device) and breaks PipeSP's overlap of
attention with its all-to-all. One wait per step, at its end, costs the launch of the next step's
first kernel, nothing more. On a CPU ops run synchronously and the waits do nothing.

Callers call these through the module (`device_time.wait_for_device(...)`), so that a test can
record the waits (tests/runtime/test_device_time.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch


def wait_for_device(device: torch.device, stream_only: bool = False) -> None:
    """Returns once the work queued on `device` has run (every stream of it; with stream_only,
    the current stream's only: a prompt encoded on its own stream beside a running decode must
    not wait for the decode). No-op on a CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return
    if stream_only:
        torch.cuda.current_stream(device).synchronize()
    else:
        torch.cuda.synchronize(device)


@dataclass
class Stopwatch:
    started: float
    seconds: float = 0.0


@contextlib.contextmanager
def timed(device: torch.device) -> Iterator[Stopwatch]:
    """Seconds of the enclosed device work: waits for `device` before starting the clock and
    again before reading it (`.seconds`, set on a normal exit)."""
    wait_for_device(device)
    watch = Stopwatch(time.perf_counter())
    yield watch
    wait_for_device(device)
    watch.seconds = time.perf_counter() - watch.started


@dataclass(frozen=True)
class MatmulRate:
    """A measured dense matmul rate: the ceiling a bench compares its figures with."""

    flops_per_s: float
    device: str
    dtype: str
    size: int  # square matrices of this size
    rank: int | None = None  # the rank whose device it was measured on (RankWorker.matmul_rate); None: this process

    def describe(self) -> str:
        where = self.device if self.rank is None else f"{self.device} (rank {self.rank})"
        return (f"measured {self.dtype} matmul rate on {where}: {self.flops_per_s / 1e12:.2f} TFLOP/s "
                f"({self.size}x{self.size} GEMMs)")


# Large enough to reach a GPU's sustained tensor-core rate; small enough for a CPU to time quickly.
MATMUL_SIZE = {"cuda": 8192, "cpu": 1024}


def matmul_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA (what serving runs); float32 on a CPU, whose bf16 GEMMs are emulated and slow."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def measure_matmul_rate(device: torch.device, repeats: int = 10) -> MatmulRate:
    """The best of `repeats` timed GEMMs (after a warm-up), each waited for on `device`."""
    device = torch.device(device)
    dtype = matmul_dtype(device)
    size = MATMUL_SIZE.get(device.type, MATMUL_SIZE["cpu"])
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(device, dtype) for _ in range(2))
    torch.matmul(a, b)  # warm-up: cuBLAS handles and heuristics
    best = float("inf")
    for _ in range(repeats):
        with timed(device) as watch:
            torch.matmul(a, b)
        best = min(best, watch.seconds)
    return MatmulRate(2 * size ** 3 / best, str(device), str(dtype).removeprefix("torch."), size)
