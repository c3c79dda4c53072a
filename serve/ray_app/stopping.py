"""How `pipedit serve` stops, in a fixed order whose slow steps come last:

1. announce: `pipedit serve` leaves a stop file in the data folder, named by this start's run id.
   The /healthz front answers 503 at its next probe (it looks at every probe), and each replica
   takes no new job from the moment it sees it (it looks every WATCH_S; JobService.drain).
2. hand back (`hand_back`, in the serving process itself): waits up to serve.stop_grace_s for
   the replicas' running jobs to end, then frees in the store every job the replicas of this run
   still hold (status queued, owner and lease cleared: the next start, or another server on the
   store, runs them). Replicas of this run sign their jobs `<run>/...` (`owner_prefix`).
3. then Serve and Ray (launch.py), each bounded in time.

Why not leave it to the replicas' own shutdown: Serve calls a replica's __del__ only once its
open requests have ended (event streams last minutes) or its graceful_shutdown_timeout_s passed,
and on a busy machine the stop ran out of time first: a running job stayed in_progress with its
owner and lease, and /healthz answered ok for 25 s after SIGTERM.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

WATCH_S = 0.2  # how often a replica looks for the stop file
POLL_S = 0.2  # how often the stop looks whether the running jobs have ended


def new_run() -> str:
    """A fresh id for one start of `pipedit serve`."""
    return secrets.token_hex(6)


def owner_prefix(run: str) -> str:
    """How the jobs of this run's replicas are signed in the store (the owner's beginning)."""
    return f"{run}/"


def stop_file(folder: str | Path, run: str) -> Path:
    return Path(folder) / f".pipedit-stopping-{run}"


def announce(folder: str | Path, run: str) -> None:
    """Step 1: the front answers 503 and the replicas stop claiming."""
    path = stop_file(folder, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def announced(folder: str | Path, run: str | None) -> bool:
    return run is not None and stop_file(folder, run).exists()


def withdraw(folder: str | Path, run: str) -> None:
    """Removes the stop file once everything stopped (a later start has another run id anyway)."""
    stop_file(folder, run).unlink(missing_ok=True)


def watch(folder: str | Path, run: str, on_stop: Callable[[], None], done: Callable[[], bool]) -> threading.Thread:
    """In a replica: calls `on_stop()` once the stop file appears; gives up when `done()`."""
    def look() -> None:
        while not done():
            if announced(folder, run):
                on_stop()
                return
            time.sleep(WATCH_S)

    thread = threading.Thread(target=look, name="pipedit-stop-watch", daemon=True)
    thread.start()
    return thread


def hand_back(store, run: str, grace_s: float, announced_at: float) -> list[str]:
    """Step 2 (after `announce`, at time.monotonic() `announced_at`): waits up to `grace_s` for the
    jobs this run's replicas run to end, then frees those they still hold; returns their ids. A
    claim that raced the announcement (a replica looks every WATCH_S) is freed by a second pass."""
    prefix = owner_prefix(run)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and store.count("in_progress", owner_prefix=prefix):
        time.sleep(POLL_S)
    freed = store.release(prefix, prefix=True)
    late = announced_at + 3 * WATCH_S - time.monotonic()
    if late > 0:
        time.sleep(late)
        freed += store.release(prefix, prefix=True)
    return freed
