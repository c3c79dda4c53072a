from __future__ import annotations

import pytest
import torch
from dist_workers import context_and_collectives

from pipedit.distributed.context import ParallelContext
from pipedit.distributed.spawn import run_on_gloo_ranks


@pytest.fixture(scope="module")
def world4() -> list[dict]:
    return run_on_gloo_ranks(context_and_collectives, 4, timeout_s=120)


def test_single() -> None:
    ctx = ParallelContext.single()
    assert (ctx.rank, ctx.world_size, ctx.ulysses_rank, ctx.ring_rank) == (0, 1, 0, 0)
    assert ctx.sp_group is None and ctx.device == torch.device("cpu")


def test_degrees_must_multiply_to_world_size() -> None:
    with pytest.raises(ValueError, match=r"valid \(ulysses, ring\) pairs: \[\(1, 4\), \(2, 2\)"):
        ParallelContext(0, 4, 3, 1, None, None, None, (0,), torch.device("cpu"))


@pytest.mark.skipif(torch.distributed.is_initialized(), reason="needs an uninitialized process")
def test_create_requires_init() -> None:
    with pytest.raises(RuntimeError, match="init_process_group"):
        ParallelContext.create(1, 1)


def test_create_rejects_bad_degrees_on_every_rank(world4: list[dict]) -> None:
    assert all("ulysses_degree * ring_degree must equal" in r["bad_degrees"] for r in world4)


def test_layout_ulysses_groups_are_contiguous(world4: list[dict]) -> None:
    # sp rank = ring_rank * ulysses_degree + ulysses_rank
    layouts = [r["layout"] for r in world4]
    assert layouts == [(0, 0, 0, (0, 2)), (1, 1, 0, (1, 3)), (2, 0, 1, (0, 2)), (3, 1, 1, (1, 3))]
    assert [r["groups"][1] for r in world4] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["groups"][2] for r in world4] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert all(r["groups"][0] == [0, 1, 2, 3] for r in world4)


def test_sub_world_excludes_other_ranks(world4: list[dict]) -> None:
    subs = [r["sub"] for r in world4]
    assert subs[0] is None and subs[2] is None
    assert subs[3] == (0, (3, 1), True) and subs[1] == (1, (3, 1), True)


def test_async_collectives(world4: list[dict]) -> None:
    for rank, res in enumerate(world4):
        assert res["all_to_all"] and res["exchange"] and res["ulysses_round_trip"]
        assert res["all_gather"] == [rank * 10]
        assert res["all_gather_group"] == [0, 10, 20, 30]
