"""Aco on gloo ranks: denoise ranks share heads with helper decode ranks; outputs must equal
single-device attention. Each head's math is the same SDPA call wherever it runs, so the only
differences are float reorderings inside SDPA when heads are batched differently: 1e-6."""

import pytest
from aco_cases import aco_worker

from pipedit.attention.aco import plan_aco
from pipedit.distributed.spawn import run_on_gloo_ranks


@pytest.mark.parametrize("denoise,decode", [(1, 1), (2, 1), (1, 2)])
def test_aco_equals_single_device(denoise, decode):
    results = run_on_gloo_ranks(aco_worker, denoise + decode, denoise, timeout_s=120)
    for rank in range(denoise):
        assert results[rank]["max_error"] <= 1e-6
        assert results[rank]["offloads"]  # every denoise rank really offloads
    assert all(results[r]["helper_heads"] > 0 for r in range(denoise, denoise + decode))


def test_each_side_posts_all_headers_in_one_batch_and_builds_headers_once():
    """NCCL runs a group's batched P2P in issue order on one stream: a second helper's header
    posted after the first helper's exchange would wait for the first helper's compute. And a
    header built from a Python list on every call is a pageable copy (a stream sync) per call."""
    from aco_cases import CALLS

    denoise_posts = run_on_gloo_ranks(aco_worker, 3, 1, timeout_s=120)[0]["posts"]  # 1 denoise rank, 2 helpers
    assert [(op, sent, received) for op, sent, received, _ in denoise_posts] == [
        ("Aco header send", [1, 2], []), ("Aco heads exchange", [1, 2], [1, 2])] * CALLS
    headers = [pointers for op, _, _, pointers in denoise_posts if op == "Aco header send"]
    assert headers[0] == headers[1]  # the same header tensors (same shape of call): built once
    helper_posts = run_on_gloo_ranks(aco_worker, 3, 2, timeout_s=120)[2]["posts"]  # 2 denoise ranks, 1 helper
    assert [(op, sent, received) for op, sent, received, _ in helper_posts] == [
        ("Aco header receive", [], [0, 1]), ("Aco request receive", [], [0, 1]), ("Aco reply send", [0, 1], [])] * CALLS


def test_plan_balances_heads_by_rank_count():
    # 1 denoise + 1 decode, 24 heads: 12 each.
    assert plan_aco(24, [0], [1]).offloads == (((1, 12),),)
    # 7 denoise + 1 decode (the paper's uneven case): 24 heads as (4,4,4,3,3,3,3); the helper takes
    # a share of each rank instead of padding heads.
    plan = plan_aco(24, list(range(7)), [7])
    assert plan.offloads == (((7, 1),), ((7, 1),), ((7, 1),), (), (), (), ())
    assert sum(n for _, n in plan.served_by(7)) == 3
    # 2 denoise + 2 decode: each denoise rank gets its own helper and halves its heads.
    assert plan_aco(8, [0, 1], [2, 3]).offloads == (((2, 2),), ((3, 2),))
    # 1 denoise + 3 decode: 8 heads split into 4 parts of 2.
    assert plan_aco(8, [0], [1, 2, 3]).offloads == (((1, 2), (2, 2), (3, 2)),)
