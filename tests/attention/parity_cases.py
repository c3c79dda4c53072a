"""Cases and the per-rank worker for the multi-rank attention parity tests.

Kept in its own module so spawned ranks can import the worker without importing a test module.
Each rank builds the same random full tensors (seeded), computes the single-device "local"
reference, runs the strategy on its shard and reports errors; the parent test asserts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from pipedit.attention import get_attention_strategy
from pipedit.attention.autotune import AttentionShape, measure_chunks
from pipedit.attention.base import JointTokens
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import shard_range, shard_sizes


@dataclass(frozen=True)
class Case:
    name: str
    strategy: str
    layout: tuple[int, int]  # (ulysses_degree, ring_degree)
    seq: int
    heads: int
    text: int = 0  # joint text tokens; 0 = none
    pad: bool = False  # mask some text keys out
    options: dict[str, Any] = field(default_factory=dict)
    sync_twin: bool = False  # also run sync ulysses/usp and compare bit-for-bit
    via_handles: bool = False  # also run start_sequence_to_heads + attend_heads, compare
    batch: int = 2
    head_dim: int = 8
    dtype: str = "float32"


def make_inputs(case: Case, seed: int = 0) -> dict[str, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(seed)
    shape = (case.batch, case.seq, case.heads, case.head_dim)
    dtype = getattr(torch, case.dtype)
    tensors: dict[str, torch.Tensor | None] = {
        n: torch.randn(shape, generator=gen).to(dtype) for n in ("q", "k", "v")
    }
    text = (case.batch, case.text, case.heads, case.head_dim)
    for n in ("joint_q", "joint_k", "joint_v"):
        tensors[n] = torch.randn(text, generator=gen).to(dtype) if case.text else None
    mask = None
    if case.text and case.pad:
        mask = torch.ones(case.batch, case.text, dtype=torch.bool)
        mask[0, -1] = False  # one padded key
        mask[-1, 1:] = False  # only one valid key
    tensors["joint_kv_mask"] = mask
    return tensors


def run_case(case: Case, ctx: ParallelContext) -> dict[str, Any]:
    inputs = make_inputs(case)
    ref_out, ref_joint = get_attention_strategy("local", ParallelContext.single())(
        inputs["q"], inputs["k"], inputs["v"], shard_sizes=(case.seq,), **_joint(inputs)
    )
    sizes = shard_sizes(case.seq, ctx.world_size)
    start, stop = shard_range(sizes, ctx.rank)
    local = [inputs[n][:, start:stop] for n in ("q", "k", "v")]  # type: ignore[index]
    strategy = get_attention_strategy(case.strategy, ctx, **case.options)
    out, joint = strategy(*local, shard_sizes=sizes, **_joint(inputs))
    result: dict[str, Any] = {
        "out_err": _max_err(out, ref_out[:, start:stop]),
        "out_shape": tuple(out.shape),
        "dtypes": (out.dtype, None if joint is None else joint.dtype),
        "joint": joint,
        "joint_err": None if joint is None else _max_err(joint, ref_joint),
    }
    if case.via_handles:
        start = strategy.start_sequence_to_heads  # type: ignore[attr-defined]
        pending = [start(t, sizes) for t in local]  # e.g. q's all-to-all runs while k is projected
        heads = [p.wait() for p in pending]
        h_out, h_joint = strategy.attend_heads(  # type: ignore[attr-defined]
            *heads, num_heads=case.heads, shard_sizes=sizes, **_joint(inputs)
        )
        result["handles_equal"] = torch.equal(out, h_out) and _equal(joint, h_joint)
    if case.sync_twin:
        twin = get_attention_strategy(case.strategy, ctx)
        twin_out, twin_joint = twin(*local, shard_sizes=sizes, **_joint(inputs))
        result["bit_equal"] = torch.equal(out, twin_out) and _equal(joint, twin_joint)
    return result


def parity_worker(
    rank: int, world_size: int, cases: list[Case], bench_layout: tuple[int, int] | None = None
) -> dict[str, Any]:
    contexts = {}
    for layout in sorted({c.layout for c in cases}):  # same creation order on every rank
        contexts[layout] = ParallelContext.create(*layout)
    results: dict[str, Any] = {case.name: run_case(case, contexts[case.layout]) for case in cases}
    if bench_layout is not None:  # piggybacks on this spawn: process start dominates test time
        strategy = get_attention_strategy("usp", contexts[bench_layout], chunk_heads=1)
        shape = AttentionShape(seq_len=9, text_len=2, heads=3, head_dim=8)
        results["__bench__"] = measure_chunks(strategy, contexts[bench_layout], shape, torch.float32, rounds=3)
        results["__chunk_after__"] = strategy.chunk_heads
    return results


def _joint(inputs: dict[str, torch.Tensor | None]) -> dict[str, JointTokens]:
    tokens = (inputs[n] for n in ("joint_q", "joint_k", "joint_v", "joint_kv_mask"))
    return {"joint": JointTokens(*tokens)}


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def _equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
