"""Ulysses all-to-alls between sequence-sharded and head-sharded layouts (uneven sizes allowed).

Buffers are flat and split by element counts, so uneven sequence shards and uneven head shards
need no padding. Each send piece is laid out so that the received pieces, stacked in source-rank
order, already form the target tensor up to a view (one copy per side). `state`: the posting rank's
RankState (fault points, operation deadline).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pipedit.distributed.collectives import (
    Pending,
    ProcessGroup,
    all_gather_async,
    all_to_all_async,
)
from pipedit.distributed.rank_state import RankState
from pipedit.distributed.sharding import shard_offsets


def pack(pieces: Sequence[torch.Tensor]) -> torch.Tensor:
    """Copy (possibly strided) pieces into one flat contiguous buffer, in order."""
    flat = pieces[0].new_empty(sum(p.numel() for p in pieces))
    start = 0
    for piece in pieces:
        flat[start : start + piece.numel()].view(piece.shape).copy_(piece)
        start += piece.numel()
    return flat


def start_sequence_to_heads(
    x: torch.Tensor,
    seq_sizes: Sequence[int],
    head_sizes: Sequence[int],
    rank: int,
    group: ProcessGroup | None,
    state: RankState | None = None,
) -> Pending[torch.Tensor]:
    """[B, seq_sizes[rank], H, D] -> [B, sum(seq_sizes), head_sizes[rank], D] over `group`."""
    if group is None:
        return Pending.ready(x)
    batch, _, _, dim = x.shape
    seq_x = x.permute(1, 0, 2, 3)  # [S_rank, B, H, D]: pieces stack along the sequence
    starts = shard_offsets(head_sizes)
    pieces = [seq_x[:, :, s : s + n] for s, n in zip(starts, head_sizes)]
    recv_splits = [n * batch * head_sizes[rank] * dim for n in seq_sizes]
    pending = all_to_all_async(pack(pieces), [p.numel() for p in pieces], recv_splits, group, state)
    shape = (sum(seq_sizes), batch, head_sizes[rank], dim)
    return pending.then(lambda flat: flat.view(shape).permute(1, 0, 2, 3))


def start_heads_to_sequence(
    x: torch.Tensor,
    seq_sizes: Sequence[int],
    head_sizes: Sequence[int],
    rank: int,
    group: ProcessGroup | None,
    state: RankState | None = None,
) -> Pending[torch.Tensor]:
    """[B, sum(seq_sizes), head_sizes[rank], D] -> [sum(head_sizes), seq_sizes[rank], B, D].

    The result's heads are in source-rank order; the caller permutes to [B, S, H, D] once after
    stacking all head chunks (PipeSP), see `assemble_heads`.
    """
    head_x = x.permute(2, 1, 0, 3)  # [h_rank, S_group, B, D]: pieces stack along the heads
    if group is None:
        return Pending.ready(head_x)
    batch, _, _, dim = x.shape
    starts = shard_offsets(seq_sizes)
    pieces = [head_x[:, s : s + n] for s, n in zip(starts, seq_sizes)]
    recv_splits = [h * seq_sizes[rank] * batch * dim for h in head_sizes]
    pending = all_to_all_async(pack(pieces), [p.numel() for p in pieces], recv_splits, group, state)
    shape = (sum(head_sizes), seq_sizes[rank], batch, dim)
    return pending.then(lambda flat: flat.view(shape))


def assemble_heads(chunks: Sequence[torch.Tensor], order: torch.Tensor | None) -> torch.Tensor:
    """Stack [h_c, S, B, D] chunks; `order[i]` = original head index of stacked head i, an index
    tensor on the chunks' device built once per plan (a host list here would be a blocking
    host-to-device copy per call). None means the stacked order already is the original one.
    Returns [B, S, H, D]."""
    stacked = chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=0)
    if order is not None:
        restored = torch.empty_like(stacked)
        restored.index_copy_(0, order, stacked)
        stacked = restored
    return stacked.permute(2, 1, 0, 3)


def start_gather_heads(
    x: torch.Tensor,
    head_sizes: Sequence[int],
    group: ProcessGroup | None,
    state: RankState | None = None,
) -> Pending[torch.Tensor]:
    """All-gather [B, L, head_sizes[rank], D] over heads -> [B, L, sum(head_sizes), D].

    all_gather needs equal shapes: pieces are padded to the largest head count, then trimmed.
    """
    if group is None:
        return Pending.ready(x)
    most = max(head_sizes)
    padded = x.new_zeros(*x.shape[:2], most, x.shape[3])
    padded[:, :, : x.shape[2]] = x
    pending = all_gather_async(padded, group, state)
    return pending.then(
        lambda parts: torch.cat([p[:, :, :n] for p, n in zip(parts, head_sizes)], dim=2)
    )
