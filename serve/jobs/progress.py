"""Progress rows written off the engine's thread.

The engine's loop thread reports every step of every request; it must never wait for the job
store (another process may hold SQLite's lock for seconds, a full disk fails every write). So
`ProgressWriter.put` only records the event in memory and returns; a thread of its own writes
each job's latest progress. Events of one job that arrive while a write is under way are
coalesced (the newest wins, the first one's time stays the job's start), and a write that fails
is dropped: the next event carries a newer state anyway. Final states are never written here:
the dispatcher writes those and keeps them until they are recorded.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from pipedit.request import RequestEvent

from .store import JobStore
from .views import event_fields

_log = logging.getLogger(__name__)


@dataclass
class _Pending:
    attempt: int
    event: RequestEvent
    started_at: float  # the first event's time of the ones coalesced


class ProgressWriter:
    """Writes the latest event of each job `owner` runs, as (owner, attempt) in `store`."""

    def __init__(self, store: JobStore, owner: str):
        self.store, self.owner = store, owner
        self._pending: dict[str, _Pending] = {}
        self._changed = threading.Condition()
        self._closing = False
        self.dropped = 0  # writes that failed (store locked or full); the next event supersedes each
        self._failing = False  # the last write failed: said once, until one succeeds again
        self._thread = threading.Thread(target=self._run, name="pipedit-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, attempt: int, event: RequestEvent) -> None:
        """On the engine's thread: never touches the store, never waits for it."""
        with self._changed:
            earlier = self._pending.get(event.request_id)
            started = earlier.started_at if earlier is not None and earlier.attempt == attempt else event.at
            self._pending[event.request_id] = _Pending(attempt, event, started)
            self._changed.notify()

    def forget(self, video_id: str) -> None:
        """The job's run ended: its unwritten progress no longer matters."""
        with self._changed:
            self._pending.pop(video_id, None)

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._closing)
                if self._closing:
                    return
                batch, self._pending = self._pending, {}
            for video_id, pending in batch.items():
                self._write(video_id, pending)

    def _write(self, video_id: str, pending: _Pending) -> None:
        try:
            record = self.store.get(video_id)
            if record is None or record.owner != self.owner or record.attempt != pending.attempt:
                return  # deleted, finished elsewhere or taken back: nothing of ours to show
            fields = event_fields(pending.event, record, started_at=pending.started_at)
            if fields:
                self.store.update_owned(video_id, self.owner, pending.attempt, **fields)
        except Exception as error:  # noqa: BLE001 - locked or full store: this progress is dropped
            self.dropped += 1
            if not self._failing:
                _log.warning("progress not recorded (%s); dropped until the store takes writes again (the next "
                             "event brings each job up to date)", error)
            self._failing = True
            return
        if self._failing:
            _log.info("progress is recorded again (%d update(s) dropped so far)", self.dropped)
            self._failing = False
