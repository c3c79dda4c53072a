"""The deadline watch must not keep an op's buffers alive.

An NCCL Work holds its input and output tensors until the Work object is released; torch's fake
process group ("fake" backend, no peers, no memory semantics) does not, so the test wraps its
Works in one that does, as NCCL's do. Pending.wait() on the device path (forced here: the fake
group runs on CPU tensors) must then leave nothing of the all-to-all alive once the caller drops
its result, however many calls a forward makes before the step's settle(). Watching the Works
themselves (the old behaviour, restored by a monkeypatch) keeps every receive buffer alive."""

import gc
import weakref

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from pipedit.distributed import collectives, deadline
from pipedit.distributed.rank_state import RankState


class HoldsBuffers:
    """A Work that keeps its tensors alive, as ProcessGroupNCCL's do."""

    def __init__(self, work, tensors):
        self.work, self.tensors = work, tensors

    def wait(self, timeout=None):
        return self.work.wait()

    def is_completed(self):
        return True


class Completed:
    def query(self):
        return True


@pytest.fixture
def fake_world(monkeypatch):
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    original = dist.all_to_all_single

    def all_to_all_single(output, input, *args, **kwargs):
        return HoldsBuffers(original(output, input, *args, **kwargs), (output, input))

    monkeypatch.setattr(dist, "all_to_all_single", all_to_all_single)
    monkeypatch.setattr(collectives, "device_side", lambda tensors: True)
    monkeypatch.setattr(collectives, "completion_marker", Completed)
    state = RankState.for_rank(0, 60.0)
    yield dist.group.WORLD, state
    state.deadline.settle()
    dist.destroy_process_group()


def _forward_of_attention_calls(world, calls: int) -> list:
    """`calls` all-to-alls whose results are used and dropped, as attention calls do; weak
    references to every receive buffer."""
    group, state = world
    received = []
    for _ in range(calls):
        out = collectives.all_to_all_async(torch.ones(1024), [512, 512], [512, 512], group, state).wait()
        received.append(weakref.ref(out))
        del out
    gc.collect()
    return received


def test_waited_ops_release_their_buffers_before_the_step_settles(fake_world):
    received = _forward_of_attention_calls(fake_world, calls=6)
    assert fake_world[1].deadline.watched_count() == 6  # each op is still checked at settle()...
    assert [ref() for ref in received] == [None] * 6  # ...but none keeps its buffer alive


def test_watching_the_works_would_keep_every_buffer_alive(fake_world, monkeypatch):
    """The defect the invariant prevents: the check above fails against it."""
    watched = []

    def old_wait(self, host=False, max_sleep=deadline.POLL_MAX_S):
        for work in self._works:
            work.wait()
        watched.append(list(self._works))  # kept until the step settles
        self._result, self._waited, self._works = self._finish(), True, []
        return self._result

    monkeypatch.setattr(collectives.Pending, "wait", old_wait)
    received = _forward_of_attention_calls(fake_world, calls=6)
    assert all(ref() is not None for ref in received)
