"""Per-step latency of the denoising transformer under different PipeSP chunk sizes, measured
inside the workers (no driver round trips in the figures)."""

from __future__ import annotations

import statistics

from ..attention.autotune import interleaved_samples
from ..guidance import branch_passes
from ..request import VideoRequest


def time_steps(worker, request: VideoRequest, cond: dict, chunks: list, rounds: int) -> dict:
    """Seconds per denoising step (and its guidance branches, `cfg_branches`) for each entry of `chunks` (None: synchronous Ulysses, an int:
    that PipeSP chunk, "auto": what auto picks), the modes interleaved over `rounds` rounds;
    median of the slowest rank's samples. Collective across the SP group."""
    worker.begin(request, cond)
    adapter, job, sp = worker.adapter, worker.job, worker.sp
    resolved = [sp.auto_chunk(adapter, request) if label == "auto" else label for label in chunks]

    def step_with(chunk):
        def call():
            sp.strategy.chunk_heads = chunk
            return adapter.predict_noise(job.latents, job.timesteps[0], job.cond, request.guidance_scale)
        return call

    samples = interleaved_samples([step_with(chunk) for chunk in resolved], rounds, sp.ctx)
    worker.job = None
    branches = branch_passes(adapter, job.cond, request.guidance_scale)  # the forwards one step ran
    return {
        label: {"chunk": chunk, "step_s": statistics.median(samples[:, i].tolist()), "cfg_branches": branches}
        for i, (label, chunk) in enumerate(zip(chunks, resolved))
    }
