from __future__ import annotations

import time

import pytest
from dist_workers import echo, hard_exit, raise_on_last_rank, sleep_forever

from pipedit.distributed.spawn import RankFailure, run_on_gloo_ranks


def test_returns_results_in_rank_order() -> None:
    assert run_on_gloo_ranks(echo, 2, "hi") == [(0, 2, "hi"), (1, 2, "hi")]


def test_child_exception_raises_with_traceback() -> None:
    with pytest.raises(RankFailure) as err:
        run_on_gloo_ranks(raise_on_last_rank, 2, timeout_s=60)
    assert "boom from the last rank" in str(err.value)
    assert "Traceback" in str(err.value)


def test_timeout_raises_instead_of_hanging() -> None:
    start = time.monotonic()
    with pytest.raises(RankFailure, match="did not finish within"):
        run_on_gloo_ranks(sleep_forever, 1, timeout_s=3)
    assert time.monotonic() - start < 20


def test_rank_dying_without_result_is_reported() -> None:
    with pytest.raises(RankFailure, match="exit codes"):
        run_on_gloo_ranks(hard_exit, 1, timeout_s=60)


def test_rejects_empty_world() -> None:
    with pytest.raises(ValueError):
        run_on_gloo_ranks(echo, 0, "x")
