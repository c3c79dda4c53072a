"""Sparse self-attention (TokenLayout) and cross-attention through every strategy equal the
single-device reference of the same call (gloo ranks on CPU).

Tolerance 1e-6 (as Ulysses parity): Ulysses only moves data and each head runs the same kernel
on the same regrouped full sequence; cross-attention over a ring block attends the same text keys
per query. Chunked (PipeSP) and unchunked runs are compared bit-for-bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from call_shape_cases import ShapeCase, shape_worker
from skip_layout import SkipLayout

from pipedit.attention import get_attention_strategy
from pipedit.attention.base import JointTokens
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.spawn import run_on_gloo_ranks

ATOL = 1e-6
U2, R2, U3 = (2, 1), (1, 2), (3, 1)
PIPE = {"chunk_heads": 1}

CASES = {
    2: [
        ShapeCase("sparse single, 5 heads S=7", "ulysses", U2, 7, 5, "sparse-single"),
        ShapeCase("sparse group, S=13", "ulysses", U2, 13, 3, "sparse-group"),
        ShapeCase("sparse group pipesp chunk 1", "ulysses", U2, 13, 5, "sparse-group", options=PIPE,
                  sync_twin=True),
        ShapeCase("sparse S=1 (empty shard)", "ulysses", U2, 1, 2, "sparse-single"),
        ShapeCase("cross, padded text", "ulysses", U2, 7, 5, "cross"),
        ShapeCase("cross pipesp chunk 1", "ulysses", U2, 7, 5, "cross", options=PIPE, sync_twin=True,
                  via_handles=True),
        ShapeCase("cross on ring", "ring", R2, 7, 3, "cross"),
        ShapeCase("cross on usp 1x2", "usp", R2, 7, 3, "cross"),
    ],
    3: [
        ShapeCase("sparse single pipesp (uneven heads, S)", "ulysses", U3, 10, 4, "sparse-single",
                  options=PIPE, sync_twin=True),
        ShapeCase("sparse group via handles", "ulysses", U3, 11, 5, "sparse-group", via_handles=True),
        ShapeCase("cross pipesp (uneven heads, S)", "ulysses", U3, 10, 4, "cross", options=PIPE,
                  sync_twin=True),
    ],
}
ALL = [(world, case) for world, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def results() -> dict[int, list[dict]]:
    return {world: run_on_gloo_ranks(shape_worker, world, cases, timeout_s=120) for world, cases in CASES.items()}


@pytest.mark.parametrize(("world", "case"), ALL, ids=[f"{w}r-{c.name}" for w, c in ALL])
def test_call_shape_matches_local(results, world: int, case: ShapeCase) -> None:
    for rank, per_rank in enumerate(results[world]):
        res = per_rank[case.name]
        assert res["shape_ok"] and res["no_text"]
        assert res["err"] <= ATOL, f"rank {rank}: error {res['err']}"
        if case.sync_twin:
            assert res["bit_equal"], f"rank {rank}: PipeSP chunks differ from the unchunked run"
        if case.via_handles:
            assert res["handles_equal"]


@pytest.mark.parametrize("group", [False, True])
def test_skip_layout_equals_dense_masked_attention(group: bool) -> None:
    """The reference path itself: regroup/attend/ungroup equals attention under the layout's mask."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 11, 3, 8, generator=gen) for _ in range(3))
    layout = SkipLayout(2, group=group)
    out, _ = get_attention_strategy("local", ParallelContext.single())(q, k, v, shard_sizes=(11,), layout=layout)
    dense = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=layout.dense_mask(11)
    ).transpose(1, 2)
    assert (out - dense).abs().max().item() <= 1e-6


def test_cross_attention_reference_is_plain_masked_attention() -> None:
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 6, 2, 8, generator=gen)
    tk, tv = (torch.randn(1, 4, 2, 8, generator=gen) for _ in range(2))
    mask = torch.tensor([[True, True, False, False]])
    out, text = get_attention_strategy("local", ParallelContext.single())(
        q, None, None, shard_sizes=(6,), joint=JointTokens(k=tk, v=tv, kv_mask=mask)
    )
    expected = F.scaled_dot_product_attention(
        q.transpose(1, 2), tk[:, :2].transpose(1, 2), tv[:, :2].transpose(1, 2)
    ).transpose(1, 2)
    assert text is None and (out - expected).abs().max().item() <= 1e-6


def test_bad_call_shapes_are_refused_with_the_fix() -> None:
    local = get_attention_strategy("local", ParallelContext.single())
    x = torch.zeros(1, 4, 2, 8)
    text = torch.zeros(1, 3, 2, 8)
    with pytest.raises(ValueError, match="needs the text keys"):
        local(x, None, None, shard_sizes=(4,))
    with pytest.raises(ValueError, match="video self-attention only"):
        local(x, x, x, shard_sizes=(4,), joint=JointTokens(text, text, text), layout=SkipLayout(2))
    with pytest.raises(TypeError, match="TokenLayout"):
        local(x, x, x, shard_sizes=(4,), layout="skiparse")
    with pytest.raises(ValueError, match="both joint_k and joint_v"):
        local(x, None, None, shard_sizes=(4,), joint=JointTokens(k=text))
