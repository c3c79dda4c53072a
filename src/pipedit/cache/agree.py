"""The collective part of a decision: local sums -> the sums over every denoise rank.

Each denoise rank holds a sequence shard (Ulysses/Ring/USP) and, under CFG parallel, one branch
of the signal, so the single-device distance sum|a-b| / sum|b| is a ratio of two global sums:
one all-reduce of a 2-element tensor per group (the SP group, then the rank's CFG peers) gives
every rank the same two numbers, hence the same decision. A max of per-rank ratios would be a
different number and could split the ranks near the threshold (shards then diverge, or a rank
waits in a collective its peers skipped)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..distributed.collectives import all_reduce_async
from ..distributed.deadline import LATENCY_POLL_S
from ..distributed.rank_state import RankState


def global_sums(local: torch.Tensor, groups: Sequence, state: RankState | None = None) -> list[float]:
    """Sums of `local` (float32) over every rank of `groups` (None entries: a group of one).
    Runs under `state`'s op deadline; the host reads the result (the decision is a host branch)."""
    total = local
    for group in groups:
        if group is not None:
            # In the middle of every forward, on the critical path: poll as Aco's header waits do,
            # not with the 10 ms back-off of off-path waits (half of it lost per decision on average).
            pending = all_reduce_async(total, group, op="step cache decision", state=state)
            total = pending.wait(host=True, max_sleep=LATENCY_POLL_S)
    return [float(v) for v in total.tolist()]


class Agreement:
    """global_sums over fixed groups (`groups` empty on one rank), posted with the rank's `state`."""

    def __init__(self, groups: Sequence = (), state: RankState | None = None):
        self.groups = tuple(g for g in groups if g is not None)
        self.state = state

    def __call__(self, local: torch.Tensor) -> list[float]:
        return global_sums(local, self.groups, self.state)
