"""Step-cache decisions on fake tensors: the agreement's all-reduces run (the recorder logs them
per group, so their sequences are compared like every collective's), but a fake tensor has no
value to decide on. The sums the host reads are scripted instead, the same on every rank: the
first measured decision of a rank computes, the next skips, and so on, so that both paths (and
the memory a skip's cached residuals hold) are covered."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.distributed as dist

from ..cache import agree

SKIP, COMPUTE = [0.0, 1.0], [1.0, 0.0]  # distance 0, and a zero reference (infinitely far)


@contextlib.contextmanager
def scripted_decisions() -> Iterator[dict[int, int]]:
    """Yields the decisions taken per rank."""
    original, taken = agree.global_sums, {}

    def global_sums(local, groups, state=None):
        for group in groups:
            if group is not None:
                local = agree.all_reduce_async(local, group, op="step cache decision", state=state).wait(host=True)
        rank = dist.get_rank()
        taken[rank] = taken.get(rank, 0) + 1
        return list(COMPUTE if taken[rank] % 2 else SKIP)

    agree.global_sums = global_sums
    try:
        yield taken
    finally:
        agree.global_sums = original
