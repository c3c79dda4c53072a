"""Asynchronous collectives that return a handle: issue compute first, wait later.

Every helper returns a `Pending` whose .wait() returns the result tensor(s). On gloo the
overlap comes from async_op=True (gloo runs the op on its own thread). On CUDA, a `CommStream`
issues the op on a dedicated stream ordered after the producing compute by an event, as PipeSP
does; .wait() orders the caller's current stream after the communication.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
U = TypeVar("U")
ProcessGroup = dist.ProcessGroup


class Pending(Generic[T]):
    """Result of an in-flight communication. Holds every buffer the op touches until wait()."""

    def __init__(
        self,
        works: Sequence[Any],
        finish: Callable[[], T],
        keep_alive: Sequence[torch.Tensor] = (),
        done_event: Any = None,
    ) -> None:
        self._works = list(works)
        self._finish = finish
        self._keep_alive = list(keep_alive)
        self._done_event = done_event
        self._result: T | None = None
        self._waited = False

    @classmethod
    def ready(cls, value: T) -> Pending[T]:
        return cls((), lambda: value)

    def then(self, fn: Callable[[T], U]) -> Pending[U]:
        """A handle whose wait() returns fn(self.wait())."""
        return Pending((self,), lambda: fn(self.wait()))

    def wait(self) -> T:
        if not self._waited:
            for work in self._works:
                work.wait()
            if self._done_event is not None:
                torch.cuda.current_stream().wait_event(self._done_event)
            self._result = self._finish()
            self._waited = True
            self._works, self._keep_alive, self._done_event = [], [], None
        return self._result  # type: ignore[return-value]


class CommStream:
    """Dedicated CUDA stream for communication; a no-op wrapper on CPU (gloo threads overlap)."""

    def __init__(self, device: torch.device | str) -> None:
        device = torch.device(device)
        use_cuda = device.type == "cuda" and torch.cuda.is_available()
        self.stream = torch.cuda.Stream(device=device) if use_cuda else None

    def launch(
        self,
        issue: Callable[[], Sequence[Any]],
        finish: Callable[[], T],
        tensors: Sequence[torch.Tensor],
    ) -> Pending[T]:
        """Run `issue` (which starts async collectives and returns their works) on this stream."""
        if self.stream is None:
            return Pending(issue(), finish, tensors)
        ready = torch.cuda.Event()
        ready.record()  # compute that produced `tensors`, on the caller's stream
        self.stream.wait_event(ready)
        with torch.cuda.stream(self.stream):
            works = issue()
        for tensor in tensors:
            # Hazard: the caching allocator must not recycle these while the comm stream uses them.
            tensor.record_stream(self.stream)
        done = torch.cuda.Event()
        done.record(self.stream)
        return Pending(works, finish, tensors, done)


def all_to_all_async(
    send: torch.Tensor,
    send_splits: Sequence[int],
    recv_splits: Sequence[int],
    group: ProcessGroup | None,
    comm: CommStream | None = None,
) -> Pending[torch.Tensor]:
    """all_to_all_single on flat (1-D) buffers with per-rank element counts (uneven allowed)."""
    recv = send.new_empty(sum(recv_splits))
    if group is None:
        recv.copy_(send)
        return Pending.ready(recv)

    def issue() -> list[Any]:
        return [
            dist.all_to_all_single(
                recv, send, list(recv_splits), list(send_splits), group=group, async_op=True
            )
        ]

    return (comm or _NO_STREAM).launch(issue, lambda: recv, (send, recv))


def all_gather_async(
    tensor: torch.Tensor, group: ProcessGroup | None, comm: CommStream | None = None
) -> Pending[list[torch.Tensor]]:
    """All-gather of equal-shape tensors; the result lists one tensor per group rank."""
    if group is None:
        return Pending.ready([tensor])
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]

    def issue() -> list[Any]:
        return [dist.all_gather(parts, tensor, group=group, async_op=True)]

    return (comm or _NO_STREAM).launch(issue, lambda: parts, (tensor, *parts))


def exchange_async(
    send: torch.Tensor | None,
    dst: int,
    recv: torch.Tensor | None,
    src: int,
    group: ProcessGroup | None,
) -> Pending[torch.Tensor | None]:
    """Send `send` to global rank dst while receiving into `recv` from global rank src (ring step).

    Either side may be None (nothing to move, e.g. an empty sequence block): both peers know
    block sizes in advance, so they skip consistently.
    """
    ops = []
    if send is not None:
        ops.append(dist.P2POp(dist.isend, send, dst, group))
    if recv is not None:
        ops.append(dist.P2POp(dist.irecv, recv, src, group))
    works = dist.batch_isend_irecv(ops) if ops else []
    keep = [t for t in (send, recv) if t is not None]
    return Pending(works, lambda: recv, keep)


_NO_STREAM = CommStream("cpu")
