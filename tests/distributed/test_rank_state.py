"""Two ranks' states in one process share nothing: each has its own fault plan, its own place
(phase, step), its own operation deadline and its own watched operations."""

import threading
import time

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from pipedit import faults
from pipedit.distributed import deadline
from pipedit.distributed.collectives import all_gather_async
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.rank_state import RankState


class Stuck:  # a device-side op that never completes
    def query(self):
        return False


def test_two_ranks_in_one_process_keep_their_own_faults_and_deadlines(tmp_path):
    switch = {faults.ENV: "fail:rank=1:phase=denoise:step=2", faults.ONCE_DIR_ENV: str(tmp_path)}
    first = RankState.for_rank(0, 0.2, switch)
    second = RankState.for_rank(1, 30.0, switch)
    quiet = RankState.for_rank(1, None, {})  # a rank started without the switch
    assert (first.faults.rank, second.faults.rank, first.faults.once_dir) == (0, 1, str(tmp_path))

    first.faults.enter(phase="denoise", step=2)
    second.faults.enter(phase="denoise", step=1)
    quiet.faults.enter(phase="denoise", step=2)
    first.faults.check()  # rank 0: not selected
    second.faults.check()  # rank 1, but at another step: entering on rank 0 did not move it
    quiet.faults.check()  # no fault plan
    second.faults.enter(phase="denoise", step=2)
    with pytest.raises(faults.InjectedFault, match="on rank 1 \\(denoise, step 2"):
        second.faults.check()

    first.deadline.watch(Stuck(), "all_to_all", [1], time.monotonic())
    assert (first.deadline.watched_count(), second.deadline.watched_count()) == (1, 0)
    second.deadline.settle()  # nothing of rank 0's is checked here
    with pytest.raises(deadline.OperationTimeout, match="0.2 s operation deadline"):
        first.deadline.settle()
    second.deadline.seconds = 5.0
    assert (first.deadline.seconds, quiet.deadline.seconds) == (0.2, None)


def test_a_rank_state_keeps_each_threads_place():
    """A decode rank encodes the next prompt in a second thread while it decodes."""
    state = RankState.for_rank(0, None, {faults.ENV: "fail:phase=encode"})
    state.faults.enter(phase="decode")
    other = threading.Thread(target=state.faults.enter, kwargs={"phase": "encode"})
    other.start()
    other.join()
    state.faults.check()  # this thread still decodes


def test_a_context_posts_its_collectives_with_its_own_state():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        state = RankState.for_rank(0, None, {faults.ENV: "fail:op=all_gather"})
        ctx = ParallelContext.create(2, 1, state=state, device="cpu")
        assert ctx.state is state and ParallelContext.single().state is not state
        all_gather_async(torch.ones(2), ctx.sp_group).wait()  # no state: no fault points
        with pytest.raises(faults.InjectedFault, match="all_gather"):
            all_gather_async(torch.ones(2), ctx.sp_group, ctx.state)
    finally:
        dist.destroy_process_group()

