"""Per-operation deadlines: a collective or P2P transfer that does not complete in time raises
OperationTimeout naming the operation, its peers and the deadline, long before the process
group's own timeout.

On NCCL the host checks completion with work.is_completed() (a query of the op's CUDA event that
never blocks) and calls work.wait() only once an op has completed, so no host thread is stuck
inside a wait; since work.wait() there only orders the caller's stream after the op while the
host goes on issuing kernels (PipeSP's overlap depends on it), such ops are `watch`ed and
`settle` checks them at the end of each rank call (step, Aco serve, timed forward). On gloo the
host waits for every op anyway, with work.wait(timeout). Each rank holds one OpDeadline (in its
RankState, see rank_state.py): its deadline and the ops it still has to check.

Invariant (memory): what is watched is a completion marker (a CUDA event recorded on the caller's
stream after work.wait()), never the Work: an NCCL Work holds its input and output tensors, so
keeping Works until the step ends would keep every all-to-all and all-gather buffer of the forward
alive (tens of GB per forward at 720p).

Hazard: a timed-out op stays posted and its communicator is unusable; only destroying it (killing
the rank processes) clears it. The executor does exactly that, then rebuilds the group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta

_FIRST_POLL_S = 0.0005  # first sleep between polls; it doubles up to
POLL_MAX_S = 0.01
# Waits on the critical path (an Aco helper waiting for the next request's header) poll at most
# this long apart: a 10 ms sleep there would delay every attention call by ~5 ms on average.
LATENCY_POLL_S = 0.0001


class CommunicationError(RuntimeError):
    """A collective or P2P transfer failed: its communicator's state is unknown from now on."""


class OperationTimeout(CommunicationError):
    """A collective or P2P transfer did not complete within its deadline."""


def wait_all(works: Sequence, op: str, peers: Sequence[int], deadline: float | None, posted: float | None = None,
             poll: bool = False, max_sleep: float = POLL_MAX_S) -> None:
    """Waits for every work handle on the host, or raises OperationTimeout once `deadline` seconds
    (counted from `posted`, default now; None: no deadline) pass. `poll`: NCCL works, whose
    is_completed() is a non-blocking event query, polled at most `max_sleep` apart; otherwise
    (gloo, whose send/recv works only complete inside wait) work.wait(timeout), which gloo honours."""
    if deadline is None or not works:
        for work in works:
            work.wait()
        return
    give_up = (time.monotonic() if posted is None else posted) + deadline
    for work in works:
        if poll:
            _poll(work.is_completed, give_up, op, peers, deadline, max_sleep)
            work.wait()  # completed: returns at once
            continue
        try:
            work.wait(timeout=timedelta(seconds=max(give_up - time.monotonic(), 0.001)))
        except Exception as error:  # noqa: BLE001 - gloo says "timed out" as a RuntimeError
            if time.monotonic() >= give_up - 0.05:
                raise _timeout(op, peers, deadline) from error
            raise CommunicationError(f"{op} with peer rank(s) {sorted(set(peers))} failed: {error}") from error


def _poll(done, give_up: float, op: str, peers: Sequence[int], deadline: float, max_sleep: float) -> None:
    sleep = min(_FIRST_POLL_S, max_sleep)
    while not done():
        if time.monotonic() > give_up:
            raise _timeout(op, peers, deadline)
        time.sleep(sleep)
        sleep = min(sleep * 2, max_sleep)


def _timeout(op: str, peers: Sequence[int], deadline: float) -> OperationTimeout:
    return OperationTimeout(f"{op} with peer rank(s) {sorted(set(peers))} did not complete within "
                            f"the {deadline:.1f} s operation deadline (a peer died or hangs)")


class OpDeadline:
    """One rank's per-operation deadline (`seconds`; None: none, as in single-process use and
    benches) and the device-side ops it has not checked yet."""

    def __init__(self, seconds: float | None = None):
        self.seconds = seconds
        self._watched: list[tuple[float, object, str, tuple[int, ...]]] = []  # (posted at, marker, op, peers)
        self._lock = threading.Lock()

    def watching(self) -> bool:
        """Whether device-side ops need a completion marker (a deadline is set)."""
        return self.seconds is not None

    def watch(self, marker, op: str, peers: Sequence[int], posted: float) -> None:
        """A device-side op the host did not wait for, by its completion `marker` (anything with a
        non-blocking .query(), e.g. a CUDA event recorded after the op): `settle` checks it later.
        Never pass the Work itself (see the module's memory invariant)."""
        if self.seconds is not None:
            with self._lock:
                self._watched.append((posted, marker, op, tuple(peers)))

    def watched_count(self) -> int:
        with self._lock:
            return len(self._watched)

    def settle(self) -> None:
        """Raises OperationTimeout if a watched op has not completed within the deadline."""
        with self._lock:
            watched, self._watched = self._watched, []
        deadline = self.seconds
        for posted, marker, op, peers in watched:
            if deadline is not None:
                _poll(marker.query, posted + deadline, op, peers, deadline, POLL_MAX_S)
