"""Per-operation deadlines: a collective or P2P transfer that does not complete in time raises
OperationTimeout naming the operation, its peers and the deadline, long before the process
group's own timeout.

The host checks completion with work.is_completed() (on NCCL a query of the op's CUDA event that
never blocks) and calls work.wait() only once an op has completed, so no host thread is stuck
inside a wait. On gloo the host waits for every op anyway, so `wait_all` polls at once. On NCCL
work.wait() only orders the caller's stream after the op and the host goes on issuing kernels
(PipeSP's overlap depends on it): those ops are `watch`ed and `settle` checks them at the end of
each rank call (step, Aco serve, decode).

Hazard: a timed-out op stays posted and its communicator is unusable; only destroying it (killing
the rank processes) clears it. The executor does exactly that, then rebuilds the group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

_deadline_s: float | None = None  # None: no deadline (single-process use, benches)
_POLL_S = (0.0005, 0.01)  # first and longest sleep between polls
_watched: list[tuple[float, list, str, tuple[int, ...]]] = []  # (posted at, works, op, peers)
_lock = threading.Lock()


class OperationTimeout(RuntimeError):
    """A collective or P2P transfer did not complete within its deadline."""


def set_op_deadline(seconds: float | None) -> None:
    global _deadline_s
    _deadline_s = seconds


def op_deadline() -> float | None:
    return _deadline_s


def wait_all(works: Sequence, op: str, peers: Sequence[int], posted: float | None = None) -> None:
    """Waits for every work handle on the host, or raises OperationTimeout once the deadline
    (counted from `posted`, default now) passes."""
    deadline = _deadline_s
    if deadline is None or not works:
        for work in works:
            work.wait()
        return
    give_up = (time.monotonic() if posted is None else posted) + deadline
    sleep = _POLL_S[0]
    while not all(work.is_completed() for work in works):
        if time.monotonic() > give_up:
            raise OperationTimeout(f"{op} with peer rank(s) {sorted(set(peers))} did not complete within "
                                   f"the {deadline:.1f} s operation deadline (a peer died or hangs)")
        time.sleep(sleep)
        sleep = min(sleep * 2, _POLL_S[1])
    for work in works:
        work.wait()  # completed: returns at once


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
        wait_all(works, op, peers, posted)
