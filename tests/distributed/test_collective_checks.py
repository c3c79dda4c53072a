"""The multi-rank tests run under torch's collective checks (tests/attention/conftest.py sets
TORCH_DISTRIBUTED_DEBUG=DETAIL for the ranks they spawn): this shows the checks are live, i.e.
ranks that issue mismatched collectives fail with a message instead of passing on gloo."""

import pytest
from dist_workers import mismatched_collectives

from pipedit.distributed.spawn import RankFailure, run_on_gloo_ranks


def test_mismatched_collectives_are_reported_under_detail(monkeypatch):
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    with pytest.raises(RankFailure, match="(?i)mismatch"):
        run_on_gloo_ranks(mismatched_collectives, 2, timeout_s=60)
