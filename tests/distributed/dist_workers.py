"""Functions run on spawned gloo ranks by the distributed tests (importable by the children)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist

from pipedit.attention.ulysses_comm import (
    assemble_heads,
    start_gather_heads,
    start_heads_to_sequence,
    start_sequence_to_heads,
)
from pipedit.distributed.collectives import all_gather_async, all_to_all_async
from pipedit.distributed.p2p import exchange_async
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import shard_range, shard_sizes


def echo(rank: int, world_size: int, tag: str) -> tuple[int, int, str]:
    return rank, world_size, tag


def raise_on_last_rank(rank: int, world_size: int) -> None:
    if rank == world_size - 1:
        raise ValueError("boom from the last rank")
    dist.barrier()  # would wait forever for the failed rank: the parent must not hang


def sleep_forever(rank: int, world_size: int) -> None:
    time.sleep(600)


def hard_exit(rank: int, world_size: int) -> None:
    os._exit(3)


def context_and_collectives(rank: int, world_size: int) -> dict[str, Any]:
    """World 4: a (2 x 2) SP context, a 2-rank SP world inside it, and the async helpers."""
    out: dict[str, Any] = {}
    try:
        ParallelContext.create(3, 1)
    except ValueError as err:
        out["bad_degrees"] = str(err)
    ctx = ParallelContext.create(2, 2)
    assert ctx is not None
    out["layout"] = (ctx.rank, ctx.ulysses_rank, ctx.ring_rank, ctx.ring_global_ranks)
    out["groups"] = tuple(
        dist.get_process_group_ranks(g) for g in (ctx.sp_group, ctx.ulysses_group, ctx.ring_group)
    )
    sub = ParallelContext.create(1, 2, ranks=[3, 1])  # e.g. ranks 0 and 2 decode the VAE
    out["sub"] = sub and (sub.rank, sub.ring_global_ranks, sub.sp_group is not None)
    out["all_to_all"] = _check_all_to_all(rank, world_size)
    out["all_gather"] = [t.item() for t in all_gather_async(torch.tensor([rank * 10]), None).wait()]
    out["all_gather_group"] = [
        t.item() for t in all_gather_async(torch.tensor([rank * 10]), ctx.sp_group).wait()
    ]
    out["exchange"] = _check_exchange(rank, world_size)
    out["ulysses_round_trip"] = _check_ulysses_round_trip(ctx)
    return out


def _check_all_to_all(rank: int, world_size: int) -> bool:
    # Rank r sends (j + 1) copies of value 100 r + j to rank j: uneven splits, incl. sizes 1..4.
    send_splits = [j + 1 for j in range(world_size)]
    send = torch.cat([torch.full((j + 1,), float(100 * rank + j)) for j in range(world_size)])
    recv_splits = [rank + 1] * world_size
    got = all_to_all_async(send, send_splits, recv_splits, dist.group.WORLD).wait()
    expected = torch.cat([torch.full((rank + 1,), 100.0 * i + rank) for i in range(world_size)])
    return torch.equal(got, expected)


def _check_exchange(rank: int, world_size: int) -> bool:
    nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size
    recv = torch.empty(prev + 1)
    got = exchange_async(torch.full((rank + 1,), float(rank)), nxt, recv, prev, None).wait()
    return torch.equal(got, torch.full((prev + 1,), float(prev)))


def _check_ulysses_round_trip(ctx: ParallelContext) -> bool:
    # seq -> heads -> seq must return the input; heads uneven (5 on 2), sequence uneven (7 on 2).
    gen = torch.Generator().manual_seed(0)
    full = torch.randn(2, 7, 5, 3, generator=gen)
    seq = shard_sizes(7, ctx.ulysses_degree * ctx.ring_degree)
    group_seq = seq[ctx.ring_rank * 2 : ctx.ring_rank * 2 + 2]
    heads = shard_sizes(5, 2)
    start, stop = shard_range(seq, ctx.rank)
    x = full[:, start:stop]
    h = start_sequence_to_heads(x, group_seq, heads, ctx.ulysses_rank, ctx.ulysses_group).wait()
    head_start, head_stop = shard_range(heads, ctx.ulysses_rank)
    g_start = sum(seq[: ctx.ring_rank * 2])
    ok = torch.equal(h, full[:, g_start : g_start + sum(group_seq), head_start:head_stop])
    back = start_heads_to_sequence(h, group_seq, heads, ctx.ulysses_rank, ctx.ulysses_group).wait()
    ok = ok and torch.equal(assemble_heads([back], None), x)
    text = full[:, :2, head_start:head_stop]
    gathered = start_gather_heads(text, heads, ctx.ulysses_group).wait()
    return ok and torch.equal(gathered, full[:, :2])


def mismatched_collectives(rank: int, world_size: int) -> None:
    """Rank 0 all-reduces while rank 1 broadcasts, as a rank that took another branch would: on
    NCCL both wait forever."""
    tensor = torch.zeros(4)
    if rank == 0:
        dist.all_reduce(tensor)
    else:
        dist.broadcast(tensor, src=0)
