"""PipeSP chunk choice from measured cost (`--pipesp-chunk auto`).

PipeSP only changes how one attention call overlaps its output all-to-all, so the attention call
alone decides whether it pays. For a model's real per-rank shapes, every rank times the
synchronous baseline (chunk None) and chunk sizes 1, 2, 4, ... below its local head count, in
interleaved rounds; the ranks agree on the slowest rank's time per sample (all-reduce MAX), so
all of them pick the same chunk. A chunk wins only if its median beats the baseline's by more
than `margin` and it is faster in most rounds; otherwise synchronous Ulysses stays, so auto is
never slower than synchronous Ulysses beyond measurement noise.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from pipedit import device_time
from pipedit.attention.base import JointTokens
from pipedit.distributed.deadline import OpDeadline
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import shard_sizes


@dataclass(frozen=True)
class AttentionShape:
    seq_len: int  # video tokens over all ranks
    text_len: int  # joint text tokens (0: none)
    heads: int
    head_dim: int


def chunk_candidates(ulysses_degree: int, heads: int) -> list[int | None]:
    """None (synchronous) and chunk sizes 1, 2, 4, ... below the largest local head count."""
    local_heads = max(shard_sizes(heads, ulysses_degree))
    chunks, size = [], 1
    while size < local_heads:
        chunks.append(size)
        size *= 2
    return [None, *chunks]


def _inputs(ctx: ParallelContext, shape: AttentionShape, dtype: torch.dtype):
    sizes = shard_sizes(shape.seq_len, ctx.world_size)
    generator = torch.Generator("cpu").manual_seed(0)

    def rand(length):
        return torch.randn(1, length, shape.heads, shape.head_dim, generator=generator).to(ctx.device, dtype)

    q, k, v = (rand(sizes[ctx.rank]) for _ in range(3))
    joint = None
    if shape.text_len:
        # No key mask: adapters drop padded text tokens, so real calls take the unmasked kernels.
        joint = JointTokens(rand(shape.text_len), rand(shape.text_len), rand(shape.text_len))
    return (q, k, v), sizes, joint


def _timed(call, watched: OpDeadline, device: torch.device) -> float:
    device_time.wait_for_device(device)  # the previous call's (or warm-up's) work is not this one's
    start = time.perf_counter()
    out = call()
    watched.settle()  # the call's collectives completed in time: stop watching them
    device_time.wait_for_device(device)  # after settle: nothing left that could hang the wait
    elapsed = time.perf_counter() - start
    del out
    return elapsed


def slowest_rank(samples: torch.Tensor, ctx: ParallelContext) -> torch.Tensor:
    """Element-wise MAX over the SP group: a collective step ends when its slowest rank does."""
    if ctx.sp_group is None:
        return samples
    import torch.distributed as dist

    agreed = samples.to(ctx.device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=ctx.sp_group)
    return agreed.cpu()


def interleaved_samples(calls: list, rounds: int, ctx: ParallelContext) -> torch.Tensor:
    """[rounds, len(calls)] seconds, the calls taken in turn each round so that drift and
    background load hit every candidate alike. Collective: all ranks run the same calls."""
    for call in calls:
        call()  # warm-up
    watched = ctx.state.deadline
    samples = torch.tensor([[_timed(call, watched, ctx.device) for call in calls] for _ in range(rounds)],
                           dtype=torch.float64)
    return slowest_rank(samples, ctx)


def measure_chunks(strategy, ctx: ParallelContext, shape: AttentionShape, dtype: torch.dtype,
                   rounds: int = 7) -> dict[int | None, list[float]]:
    """Per-call seconds of each candidate chunk over `rounds` interleaved rounds (slowest rank).
    Collective: every rank of ctx.sp_group must call it with the same arguments."""
    args, sizes, joint = _inputs(ctx, shape, dtype)
    candidates = chunk_candidates(ctx.ulysses_degree, shape.heads)
    saved = strategy.chunk_heads

    def call_with(chunk):
        def call():
            strategy.chunk_heads = chunk
            return strategy(*args, shard_sizes=sizes, joint=joint)
        return call

    try:
        samples = interleaved_samples([call_with(c) for c in candidates], rounds, ctx)
    finally:
        strategy.chunk_heads = saved
    return {chunk: samples[:, i].tolist() for i, chunk in enumerate(candidates)}


def pick_faster(samples: dict, margin: float = 0.05):
    """The key with the lowest median if it beats the baseline (key None: synchronous Ulysses,
    or Aco off) by more than `margin` on the median and in at least two thirds of the paired
    rounds; else None, the baseline."""
    medians = {key: statistics.median(times) for key, times in samples.items()}
    best = min(medians, key=medians.get)
    if best is None or medians[best] >= medians[None] * (1 - margin):
        return None
    wins = sum(t < base for t, base in zip(samples[best], samples[None]))
    return best if wins * 3 >= 2 * len(samples[None]) else None
