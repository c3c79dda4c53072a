"""Per-rank worker for the call-shape parity tests: sparse self-attention (a TokenLayout over the
full sequence) and cross-attention (video queries, replicated text keys), on every strategy.

Each rank builds the same seeded full tensors, computes the single-device "local" reference of
the same call, runs the strategy on its shard and reports errors; the parent test asserts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from skip_layout import SkipLayout

from pipedit.attention import get_attention_strategy
from pipedit.attention.base import JointTokens
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import shard_range, shard_sizes


@dataclass(frozen=True)
class ShapeCase:
    name: str
    strategy: str
    layout: tuple[int, int]  # (ulysses_degree, ring_degree)
    seq: int
    heads: int
    kind: str  # "sparse-single", "sparse-group", "cross"
    text: int = 5  # text keys of cross-attention
    options: dict[str, Any] = field(default_factory=dict)
    sync_twin: bool = False  # also run without chunking and compare bit-for-bit
    via_handles: bool = False
    batch: int = 2
    head_dim: int = 8


def call_inputs(case: ShapeCase, seed: int = 0) -> tuple[list[torch.Tensor | None], dict[str, Any]]:
    gen = torch.Generator().manual_seed(seed)
    video = [torch.randn(case.batch, case.seq, case.heads, case.head_dim, generator=gen) for _ in range(3)]
    if case.kind == "cross":
        text = [torch.randn(case.batch, case.text, case.heads, case.head_dim, generator=gen) for _ in range(2)]
        mask = torch.ones(case.batch, case.text, dtype=torch.bool)
        mask[0, 3:] = False  # padded prompt
        return [video[0], None, None], {"joint": JointTokens(k=text[0], v=text[1], kv_mask=mask)}
    return video, {"layout": SkipLayout(2, group=case.kind == "sparse-group")}


def run_shape_case(case: ShapeCase, ctx: ParallelContext) -> dict[str, Any]:
    (q, k, v), extra = call_inputs(case)
    reference, none = get_attention_strategy("local", ParallelContext.single())(
        q, k, v, shard_sizes=(case.seq,), **extra
    )
    sizes = shard_sizes(case.seq, ctx.world_size)
    start, stop = shard_range(sizes, ctx.rank)
    local = [None if t is None else t[:, start:stop] for t in (q, k, v)]
    strategy = get_attention_strategy(case.strategy, ctx, **case.options)
    out, text = strategy(*local, shard_sizes=sizes, **extra)
    result = {
        "err": (out - reference[:, start:stop]).abs().max().item() if out.numel() else 0.0,
        "shape_ok": out.shape == reference[:, start:stop].shape,
        "no_text": text is None and none is None,
    }
    if case.sync_twin:
        twin = get_attention_strategy(case.strategy, ctx)
        result["bit_equal"] = torch.equal(out, twin(*local, shard_sizes=sizes, **extra)[0])
    if case.via_handles:
        started = [None if t is None else strategy.start_sequence_to_heads(t, sizes) for t in local]
        heads = [None if p is None else p.wait() for p in started]
        h_out, _ = strategy.attend_heads(*heads, num_heads=case.heads, shard_sizes=sizes, **extra)
        result["handles_equal"] = torch.equal(out, h_out)
    return result


def shape_worker(rank: int, world_size: int, cases: list[ShapeCase]) -> dict[str, Any]:
    contexts = {layout: ParallelContext.create(*layout) for layout in sorted({c.layout for c in cases})}
    return {case.name: run_shape_case(case, contexts[case.layout]) for case in cases}
