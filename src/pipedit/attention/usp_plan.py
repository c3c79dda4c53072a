"""Head and sequence bookkeeping for Ulysses / ring / USP (pure functions of the layout)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pipedit.attention.ring import RingSpec
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import group_sizes, shard_offsets, shard_sizes


@dataclass(frozen=True)
class HeadPlan:
    head_sizes: tuple[int, ...]  # heads owned by each ulysses rank
    seq_sizes: tuple[int, ...]  # sequence shard of each member of this rank's ulysses group
    ring: RingSpec | None  # None when ring_degree == 1
    chunks: tuple[tuple[int, ...], ...]  # per PipeSP chunk: head count of each ulysses rank
    order: tuple[int, ...] | None  # original index of each head as stacked chunk by chunk
    # `order` as an index tensor on the context's device, made once with the plan.
    order_index: torch.Tensor | None = field(default=None, compare=False)


def make_plan(
    ctx: ParallelContext, num_heads: int, sizes: tuple[int, ...], chunk_heads: int | None
) -> HeadPlan:
    degree = ctx.ulysses_degree
    heads = shard_sizes(num_heads, degree)
    group_start = ctx.ring_rank * degree
    ring = None
    if ctx.ring_degree > 1:
        ring = RingSpec(
            ctx.ring_rank, ctx.ring_global_ranks, ctx.ring_group, group_sizes(sizes, degree), ctx.state
        )
    # Chunking only pays when there is an output all-to-all to overlap (ulysses_degree > 1).
    step = max(heads) if chunk_heads is None or degree == 1 else chunk_heads
    chunks = chunk_counts(heads, step)
    order = stacked_order(heads, chunks)
    index = None if order is None else torch.tensor(order, device=ctx.device)
    return HeadPlan(heads, sizes[group_start : group_start + degree], ring, chunks, order, index)


def chunk_counts(head_sizes: tuple[int, ...], step: int) -> tuple[tuple[int, ...], ...]:
    """Per chunk, how many heads each rank processes. Every rank issues the same number of
    chunks (ceil(max heads / step)); ranks with fewer heads contribute empty pieces."""
    most = max(head_sizes)
    count = max(1, -(-most // step))
    return tuple(
        tuple(min(step, max(0, h - c * step)) for h in head_sizes) for c in range(count)
    )


def stacked_order(
    head_sizes: tuple[int, ...], chunks: tuple[tuple[int, ...], ...]
) -> tuple[int, ...] | None:
    """Original head index of each received head, chunks stacked in order, ranks within a chunk
    (the paper's interleaved order j*n + i for one head per chunk). None if already in order."""
    offsets = shard_offsets(head_sizes)
    done = [0] * len(head_sizes)
    order: list[int] = []
    for counts in chunks:
        for rank, count in enumerate(counts):
            order.extend(range(offsets[rank] + done[rank], offsets[rank] + done[rank] + count))
            done[rank] += count
    return None if order == sorted(order) else tuple(order)


def check_head_count(ctx: ParallelContext, num_heads: int, name: str) -> None:
    """Refuse layouts where a Ulysses rank would own no head."""
    if num_heads < 1:
        raise ValueError(f"need at least one attention head, got {num_heads}")
    if ctx.ulysses_degree <= num_heads:
        return
    world = ctx.world_size
    valid = [(u, world // u) for u in range(1, min(num_heads, world) + 1) if world % u == 0]
    raise ValueError(
        f"'{name}': ulysses_degree {ctx.ulysses_degree} exceeds the {num_heads} attention heads, "
        f"so some ranks would own no head. For {world} ranks use 'usp' (or 'ring') with "
        f"(ulysses_degree, ring_degree) in {valid}"
    )
