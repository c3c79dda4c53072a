"""Per-operation deadlines: a collective or P2P transfer that does not complete in time raises
OperationTimeout naming the operation, its peers and the deadline, long before the process
group's own timeout.

On NCCL the host checks completion with work.is_completed() (a query of the op's CUDA event that
never blocks) and calls work.wait() only once an op has completed, so no host thread is stuck
inside a wait; since work.wait() there only orders the caller's stream after the op while the
host goes on issuing kernels (PipeSP's overlap depends on it), such ops are `watch`ed and
`settle` checks them at the end of each rank call (step, Aco serve). On gloo the host waits for
every op anyway, with work.wait(timeout).

Hazard: a timed-out op stays posted and its communicator is unusable; only destroying it (killing
the rank processes) clears it. The executor does exactly that, then rebuilds the group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta

_deadline_s: float | None = None  # None: no deadline (single-process use, benches)
_POLL_S = (0.0005, 0.01)  # first and longest sleep between polls
_watched: list[tuple[float, list, str, tuple[int, ...]]] = []  # (posted at, works, op, peers)
_lock = threading.Lock()


class CommunicationError(RuntimeError):
    """A collective or P2P transfer failed: its communicator's state is unknown from now on."""


class OperationTimeout(CommunicationError):
    """A collective or P2P transfer did not complete within its deadline."""


def set_op_deadline(seconds: float | None) -> None:
    global _deadline_s
    _deadline_s = seconds


def op_deadline() -> float | None:
    return _deadline_s


def wait_all(works: Sequence, op: str, peers: Sequence[int], posted: float | None = None,
             poll: bool = False) -> None:
    """Waits for every work handle on the host, or raises OperationTimeout once the deadline
    (counted from `posted`, default now) passes. `poll`: NCCL works, whose is_completed() is a
    non-blocking event query; otherwise (gloo, whose send/recv works only complete inside wait)
    work.wait(timeout), which gloo honours."""
    deadline = _deadline_s
    if deadline is None or not works:
        for work in works:
            work.wait()
        return
    give_up = (time.monotonic() if posted is None else posted) + deadline
    for work in works:
        if poll:
            _poll(work, give_up, op, peers, deadline)
            continue
        try:
            work.wait(timeout=timedelta(seconds=max(give_up - time.monotonic(), 0.001)))
        except Exception as error:  # noqa: BLE001 - gloo says "timed out" as a RuntimeError
            if time.monotonic() >= give_up - 0.05:
                raise _timeout(op, peers, deadline) from error
            raise CommunicationError(f"{op} with peer rank(s) {sorted(set(peers))} failed: {error}") from error


def _poll(work, give_up: float, op: str, peers: Sequence[int], deadline: float) -> None:
    sleep = _POLL_S[0]
    while not work.is_completed():
        if time.monotonic() > give_up:
            raise _timeout(op, peers, deadline)
        time.sleep(sleep)
        sleep = min(sleep * 2, _POLL_S[1])
    work.wait()  # completed: returns at once


def _timeout(op: str, peers: Sequence[int], deadline: float) -> OperationTimeout:
    return OperationTimeout(f"{op} with peer rank(s) {sorted(set(peers))} did not complete within "
                            f"the {deadline:.1f} s operation deadline (a peer died or hangs)")


def watch(works: Sequence, op: str, peers: Sequence[int], posted: float) -> None:
    """Device-side ops the host did not wait for: `settle` checks them later."""
    if _deadline_s is not None and works:
        with _lock:
            _watched.append((posted, list(works), op, tuple(peers)))


def settle() -> None:
    """Raises OperationTimeout if a watched op has not completed within its deadline."""
    with _lock:
        watched, _watched[:] = list(_watched), []
    for posted, works, op, peers in watched:
        wait_all(works, op, peers, posted, poll=True)
