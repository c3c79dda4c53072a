"""Asynchronous collectives that return a handle: issue compute first, wait later.

Every helper returns a `Pending` whose .wait() returns the result tensor(s). The ops are posted
with async_op=True on the caller's stream: on gloo they run on gloo's own threads; on NCCL they
run on NCCL's internal stream, which first waits for the caller's current stream (so the inputs
are ready), and work.wait() makes the caller's current stream wait for the op (so the outputs
are ready), while the host goes on issuing compute. ProcessGroupNCCL keeps the tensors of an
in-flight op alive for the caching allocator itself; `Pending` also holds them until wait(), and
drops its Works there: the deadline watch keeps a CUDA event, not the Work (which would keep the
op's buffers alive until the step ends).

`state`: the posting rank's RankState (fault points, operation deadline); None: neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch
import torch.distributed as dist

from . import deadline
from .rank_state import RankState

T = TypeVar("T")
U = TypeVar("U")
ProcessGroup = dist.ProcessGroup


class Pending(Generic[T]):
    """Result of an in-flight communication. Holds every buffer the op touches until wait().
    `op` and `peers` (global ranks) name it when it misses `rank_deadline`, the posting rank's
    (None: no deadline; see .deadline)."""

    def __init__(self, works: Sequence[Any], finish: Callable[[], T], keep_alive: Sequence[torch.Tensor] = (),
                 op: str = "communication", peers: Sequence[int] = (),
                 rank_deadline: deadline.OpDeadline | None = None) -> None:
        self._works = list(works)
        self._finish = finish
        self._keep_alive = list(keep_alive)
        self._result: T | None = None
        self._waited = False
        self.op, self.peers, self._posted = op, tuple(peers), time.monotonic()
        self._deadline = rank_deadline

    @classmethod
    def ready(cls, value: T) -> Pending[T]:
        return cls((), lambda: value)

    def then(self, fn: Callable[[T], U]) -> Pending[U]:
        """A handle whose wait() returns fn(self.wait())."""
        return Pending((self,), lambda: fn(self.wait()), op=self.op, peers=self.peers,
                       rank_deadline=self._deadline)

    def wait(self, host: bool = False, max_sleep: float = deadline.POLL_MAX_S) -> T:
        """The result; under the operation deadline. NCCL ops only order the current stream
        (the host goes on) and are checked by the deadline's settle(), unless `host` (the host needs
        the data now: wait for the op itself, under the deadline, polling at most `max_sleep`
        apart: deadline.LATENCY_POLL_S where a late wake-up delays the critical path)."""
        if not self._waited:
            nested = [work for work in self._works if isinstance(work, Pending)]
            for work in nested:
                work.wait(host, max_sleep)
            works = [work for work in self._works if not isinstance(work, Pending)]
            on_device = device_side(self._keep_alive)
            watch = self._deadline
            if on_device and not host:
                for work in works:
                    work.wait()
                if works and watch is not None and watch.watching():
                    watch.watch(completion_marker(), self.op, self.peers, self._posted)
            else:
                seconds = None if watch is None else watch.seconds
                deadline.wait_all(works, self.op, self.peers, seconds, self._posted, poll=on_device,
                                  max_sleep=max_sleep)
            self._result = self._finish()
            self._waited = True
            self._works, self._keep_alive = [], []
        return self._result  # type: ignore[return-value]


def device_side(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether an op on these tensors runs on a device stream (NCCL), where waiting only orders
    the caller's stream and completion is checked later through a marker."""
    return any(t.is_cuda for t in tensors)


def completion_marker():
    """A CUDA event recorded on the current stream: it completes once the ops the stream was
    just made to wait for have completed."""
    event = torch.cuda.Event()
    event.record()
    return event


def all_to_all_async(
    send: torch.Tensor,
    send_splits: Sequence[int],
    recv_splits: Sequence[int],
    group: ProcessGroup | None,
    state: RankState | None = None,
) -> Pending[torch.Tensor]:
    """all_to_all_single on flat (1-D) buffers with per-rank element counts (uneven allowed)."""
    recv = send.new_empty(sum(recv_splits))
    if group is None:
        recv.copy_(send)
        return Pending.ready(recv)
    if state is not None:
        state.faults.check(op="all_to_all")
    work = dist.all_to_all_single(recv, send, list(recv_splits), list(send_splits), group=group, async_op=True)
    return Pending([work], lambda: recv, (send, recv), "all_to_all", dist.get_process_group_ranks(group),
                   op_deadline(state))


def all_gather_async(tensor: torch.Tensor, group: ProcessGroup | None,
                     state: RankState | None = None) -> Pending[list[torch.Tensor]]:
    """All-gather of equal-shape tensors; the result lists one tensor per group rank."""
    if group is None:
        return Pending.ready([tensor])
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    if state is not None:
        state.faults.check(op="all_gather")
    work = dist.all_gather(parts, tensor, group=group, async_op=True)
    return Pending([work], lambda: parts, (tensor, *parts), "all_gather", dist.get_process_group_ranks(group),
                   op_deadline(state))


def all_reduce_async(tensor: torch.Tensor, group: ProcessGroup | None, op: str = "all_reduce",
                     state: RankState | None = None) -> Pending[torch.Tensor]:
    """Sum over the group's ranks into a new tensor (the input is left as it was; no group: the input)."""
    if group is None:
        return Pending.ready(tensor)
    total = tensor.detach().clone().contiguous()
    if state is not None:
        state.faults.check(op="all_reduce")
    work = dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group, async_op=True)
    return Pending([work], lambda: total, (total,), op, dist.get_process_group_ranks(group), op_deadline(state))


def op_deadline(state: RankState | None) -> deadline.OpDeadline | None:
    """The deadline a Pending posted by `state`'s rank waits under."""
    return None if state is None else state.deadline
