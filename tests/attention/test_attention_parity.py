"""Every parallel strategy equals single-device "local" attention (gloo ranks on CPU).

One spawn per world size runs all of that size's cases (process start dominates the cost);
the parametrized tests below only read the results.

Tolerances:
- ULYSSES_ATOL: Ulysses only moves data; each head runs the same SDPA on the same full
  sequence as the reference, so results are exact in practice (1e-6 leaves room for kernels
  whose blocking depends on the head count).
- RING_ATOL: ring merges per-block partials via fp32 log-sum-exp, a different summation
  order than one softmax; inputs are unit-normal fp32 with head_dim 8, so 1e-5 abs.
"""

from __future__ import annotations

import pytest
import torch
from parity_cases import Case, parity_worker

from pipedit.distributed.sharding import shard_sizes
from pipedit.distributed.spawn import run_on_gloo_ranks

ULYSSES_ATOL = 1e-6
RING_ATOL = 1e-5
# bf16 ring: the fp32 merge is rounded once to bf16 (eps 2^-8 = 0.0039) while the reference
# rounds SDPA's own fp32 accumulation; outputs are O(1), so allow a few bf16 ulps.
RING_BF16_ATOL = 2e-2

U2, R2, U3, R3, USP22 = (2, 1), (1, 2), (3, 1), (1, 3), (2, 2)
PIPE = {"chunk_heads": 1}

CASES = {
    2: [
        Case("ulysses even heads, text", "ulysses", U2, seq=8, heads=4, text=3),
        Case("ulysses 5 heads S=7, padded text", "ulysses", U2, seq=7, heads=5, text=3, pad=True),
        Case("ulysses 5 heads S=7, no text", "ulysses", U2, seq=7, heads=5),
        Case("ulysses S=1 (empty shard)", "ulysses", U2, seq=1, heads=2, text=2, pad=True),
        Case("pipesp chunk 1", "ulysses", U2, 7, 5, 3, True, PIPE, sync_twin=True),
        Case("pipesp chunk 2", "ulysses", U2, 7, 5, 3, True, {"chunk_heads": 2}, sync_twin=True),
        Case("pipesp chunk 1, no text", "ulysses", U2, 7, 5, options=PIPE, sync_twin=True),
        Case("ulysses via handles", "ulysses", U2, 7, 5, 3, True, via_handles=True),
        Case("ring S=7, padded text", "ring", R2, seq=7, heads=3, text=3, pad=True),
        Case("ring S=7, no text", "ring", R2, seq=7, heads=3),
        Case("ring S=1 (empty shard)", "ring", R2, seq=1, heads=2, text=2, pad=True),
        Case("usp 2x1, padded text", "usp", U2, seq=7, heads=5, text=3, pad=True),
        Case("usp 2x1 pipesp", "usp", U2, 7, 5, 3, True, PIPE, sync_twin=True),
        Case("usp 1x2, padded text", "usp", R2, seq=7, heads=5, text=3, pad=True),
        Case("usp 1x2, no text", "usp", R2, seq=6, heads=2),
        Case("ulysses bf16", "ulysses", U2, 7, 5, 3, True, PIPE, dtype="bfloat16"),
        Case("ring bf16", "ring", R2, seq=7, heads=3, text=3, pad=True, dtype="bfloat16"),
    ],
    3: [
        Case("ulysses 4 heads S=10, padded text", "ulysses", U3, 10, 4, 3, True),
        Case("ulysses 4 heads S=10, no text", "ulysses", U3, seq=10, heads=4),
        Case("pipesp chunk 1 (uneven heads)", "ulysses", U3, 10, 4, 3, True, PIPE, sync_twin=True),
        Case("pipesp chunk 2 (uneven heads)", "ulysses", U3, 10, 7, 3, True, {"chunk_heads": 2},
             sync_twin=True),
        Case("ring S=10, padded text", "ring", R3, seq=10, heads=2, text=3, pad=True),
        Case("ring S=10, no text", "ring", R3, seq=10, heads=2),
        Case("usp 1x3, padded text", "usp", R3, seq=10, heads=3, text=2, pad=True),
    ],
    4: [
        Case("usp 2x2, padded text", "usp", USP22, seq=11, heads=5, text=3, pad=True),
        Case("usp 2x2, no text", "usp", USP22, seq=10, heads=4),
        Case("usp 2x2 pipesp chunk 1", "usp", USP22, 11, 5, 3, True, PIPE, sync_twin=True),
        Case("usp 2x2 via handles", "usp", USP22, 11, 5, 3, True, PIPE, via_handles=True),
    ],
}
BENCH_LAYOUT = {2: U2}
ALL = [(world, case) for world, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def results() -> dict[int, list[dict]]:
    return {
        world: run_on_gloo_ranks(
            parity_worker, world, cases, BENCH_LAYOUT.get(world), timeout_s=120
        )
        for world, cases in CASES.items()
    }


@pytest.mark.parametrize(("world", "case"), ALL, ids=[f"{w}r-{c.name}" for w, c in ALL])
def test_matches_local(results: dict[int, list[dict]], world: int, case: Case) -> None:
    atol = ULYSSES_ATOL if case.layout[1] == 1 else RING_ATOL
    if case.layout[1] > 1 and case.dtype == "bfloat16":
        atol = RING_BF16_ATOL
    ranks = [per_rank[case.name] for per_rank in results[world]]
    for rank, res in enumerate(ranks):
        assert res["out_err"] <= atol, f"rank {rank} video output error {res['out_err']}"
        expected = (case.batch, shard_sizes(case.seq, world)[rank], case.heads, case.head_dim)
        assert res["out_shape"] == expected
        dtype = getattr(torch, case.dtype)
        assert res["dtypes"] == (dtype, dtype if case.text else None)
        if case.text:
            assert res["joint_err"] <= atol, f"rank {rank} text output error {res['joint_err']}"
        else:
            assert res["joint"] is None
    if case.text:  # replicated text state must stay identical on every rank
        assert all(torch.equal(r["joint"], ranks[0]["joint"]) for r in ranks)


@pytest.mark.parametrize(
    ("world", "case"), [(w, c) for w, c in ALL if c.sync_twin],
    ids=[f"{w}r-{c.name}" for w, c in ALL if c.sync_twin],
)
def test_pipesp_bit_identical_to_sync(
    results: dict[int, list[dict]], world: int, case: Case
) -> None:
    for per_rank in results[world]:
        assert per_rank[case.name]["bit_equal"]


@pytest.mark.parametrize(
    ("world", "case"), [(w, c) for w, c in ALL if c.via_handles],
    ids=[f"{w}r-{c.name}" for w, c in ALL if c.via_handles],
)
def test_started_all_to_all_path_equals_call(
    results: dict[int, list[dict]], world: int, case: Case
) -> None:
    for per_rank in results[world]:
        assert per_rank[case.name]["handles_equal"]


def test_chunk_measurement_is_agreed_by_all_ranks(results: dict[int, list[dict]]) -> None:
    timings = [per_rank["__bench__"] for per_rank in results[2]]
    assert timings[0] == timings[1]  # the slowest rank's samples, identical on every rank
    assert list(timings[0]) == [None, 1]  # 3 heads on 2 ranks: at most 2 local heads
    assert all(len(samples) == 3 and min(samples) > 0 for samples in timings[0].values())
    assert all(per_rank["__chunk_after__"] == 1 for per_rank in results[2])  # restored
