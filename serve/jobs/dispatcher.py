"""The job service's engine side: takes jobs from the store for its engine loop, keeps their
leases, and turns the engine's events and outcomes into job rows and mp4 files.

Threads: the engine's loop thread calls `on_event`, which never touches the store (progress.py
writes the progress rows on a thread of its own, coalescing or dropping them while the store is
locked or full); a collector thread takes each finished request's outcome from the engine and
writes its mp4, so file I/O never stalls the engine; a dispatcher thread claims jobs when the
engine has room, renews the leases of the jobs it runs, retries final states the store could not
take, re-queues jobs of replicas that died and sweeps expired jobs (retention) and stale
temporary files (sweeper.py).

Failures: a job runs at most `max_attempts` times (each claim is one; a run ends without a
result when its replica dies or stalls and the lease lapses), then it fails with the cause
(`attempts_exhausted`). A request error (the request itself is bad) and an mp4 that cannot be
written (`write_failed`, e.g. a full disk) fail the job at once.

Invariants:
- a job is never lost: its owner's lease lapses when the owner dies, and any replica then
  re-queues it;
- a final status (completed, failed, cancelled) is never overwritten, neither by a late event
  nor by a late result of an attempt whose lease lapsed;
- a final status is never dropped: when the store cannot take it (locked, disk full) it is kept
  and written again until it is recorded, the job held (its lease renewed) meanwhile, or until
  the attempt is no longer ours (deleted, or re-queued after the lease lapsed: it runs again);
- every request submitted to the engine has its outcome taken (`engine.wait`), also when its
  job was deleted or lost meanwhile: the engine keeps no decoded video for nobody.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError

from pipedit.errors import UserInputError
from pipedit.request import RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.video import VideoWriteError, encode_mp4, publish

from .admission import Admission
from .progress import ProgressWriter
from .store import UNREADABLE, JobRecord, JobStore
from .sweeper import FileSweeper

_log = logging.getLogger(__name__)
CLAIM_POLL_S = 0.5  # how often an idle replica looks for jobs other replicas admitted
MAX_HELD = 3  # jobs one replica holds at once: one decoding, one denoising, one waiting in the engine
_FINAL_EVENTS = (RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.CANCELLED)


class Dispatcher:
    """One replica's claims and outcomes, as `owner` in the store. `request_of` turns a stored
    job into its engine request; `lock` guards `ours` and a completion's publishing against a
    job's removal (the sweeper's lock)."""

    def __init__(self, engine: EngineLoop, store: JobStore, owner: str, *, lease_s: float, max_attempts: int,
                 admission: Admission, sweeper: FileSweeper, request_of: Callable[[JobRecord], VideoRequest],
                 lock: threading.Lock):
        self.engine, self.store, self.owner = engine, store, owner
        self.lease_s, self.max_attempts = lease_s, max_attempts
        self.admission, self.sweeper, self.request_of = admission, sweeper, request_of
        self.lock = lock
        self.ours: dict[str, int] = {}  # job id -> the attempt this replica runs
        self.claimed_at: dict[str, float] = {}  # job id -> when submitted; until its outcome is taken
        self.finished: queue.Queue[str] = queue.Queue()
        # job id -> (attempt, the final fields the store could not take yet); such jobs stay in `ours`
        self.unrecorded: dict[str, tuple[int, dict]] = {}
        self.progress = ProgressWriter(store, owner)
        self.wake = threading.Event()  # set: look for work now
        self.closing = threading.Event()
        self.draining = threading.Event()  # set: claim no new job (the replica is stopping)
        self.threads = [threading.Thread(target=self._collect, name="pipedit-jobs", daemon=True),
                        threading.Thread(target=self._dispatch, name="pipedit-claims", daemon=True)]
        self._remove_listener = None

    def start(self) -> None:
        self._remove_listener = self.engine.add_listener(self.on_event)
        self.progress.start()
        for thread in self.threads:
            thread.start()

    def close(self, grace_s: float = 0.0) -> None:
        """Stops claiming; lets the jobs it runs finish (and their results be recorded) for up to
        `grace_s` seconds; then stops listening and collecting, and hands the jobs it still holds
        back to the queue."""
        self.draining.set()
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with self.lock:
                if not self.ours:
                    break
            time.sleep(0.1)
        self._remove_listener()
        self.closing.set()
        self.wake.set()
        for thread in self.threads:
            thread.join(timeout=30)
        self.progress.close()
        self._record_unrecorded()  # a last try; what still fails runs again once its lease lapses
        with self.lock:
            self.ours.clear()
        try:
            self.store.release(self.owner)
        except DBAPIError as error:  # locked or full: their leases lapse instead, and they run again
            _log.error("could not hand this replica's jobs back to the queue (%s); they run again once their "
                       "leases lapse (%.0f s)", error.orig, self.lease_s)

    def holds(self, video_id: str) -> bool:
        return video_id in self.ours

    def attempt(self, video_id: str) -> int | None:
        with self.lock:
            return self.ours.get(video_id)

    def recover(self) -> int:
        """Re-queues jobs whose owner's lease lapsed (a replica, or this server before a restart,
        died holding them); the dispatcher then runs them. Returns how many."""
        freed = self.store.requeue_expired()
        if freed:
            _log.warning("re-queued %d job(s) whose owner stopped renewing them: %s", len(freed), freed)
            self.wake.set()
        return len(freed)

    # -- the dispatcher thread ------------------------------------------------------------
    def _dispatch(self) -> None:
        beat_every = self.lease_s / 4
        sweep_every = self.sweeper.every_s
        next_beat, next_sweep = 0.0, time.monotonic() + min(sweep_every, 1.0)
        failing = None  # the error of the last pass, logged once while it repeats
        while not self.closing.is_set():
            try:
                self._record_unrecorded()
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + beat_every
                    self._heartbeat()
                    self.recover()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + sweep_every
                    self.sweeper.sweep()
                self._take_jobs()
                failing = None
            except Exception as error:  # noqa: BLE001 - e.g. the database restarting or full; try again shortly
                if str(error) != failing:
                    _log.exception("job dispatch failed; retrying (said once while it fails the same way)")
                failing = str(error)
            self.wake.wait(min(CLAIM_POLL_S, beat_every, sweep_every))
            self.wake.clear()

    def engine_can_work(self) -> bool:
        """Whether the engine can finish jobs now: it takes work and its rank group is not stalled
        (a rebuild failed, see EngineLoop.stalled)."""
        return self.engine.accepting and not getattr(self.engine, "stalled", False)

    def _heartbeat(self) -> None:
        if not self.engine_can_work():
            return  # no renewal while the engine cannot work: the leases lapse and other replicas take over
        with self.lock:
            held = set(self.ours)
        lost = held - self.store.heartbeat(self.owner, held, self.lease_s)
        for video_id in lost:  # deleted, or taken back after a stall: stop spending ranks on it
            _log.warning("job %s is no longer ours (deleted or re-queued); cancelling it here", video_id)
            with self.lock:
                self.ours.pop(video_id, None)
            self.engine.cancel(video_id)

    def _take_jobs(self) -> None:
        while not self.closing.is_set() and not self.draining.is_set() and self.engine_can_work():
            with self.lock:
                if len(self.ours) >= MAX_HELD or getattr(self.engine, "queue_length", 0) > 0:
                    return
                # A job whose earlier attempt is still in the engine (its lease lapsed in a stall and it
                # was cancelled here) waits until that attempt's outcome is taken: the engine knows
                # requests by job id, and that outcome would be taken for the new attempt.
                running_earlier = set(self.claimed_at).difference(self.ours)
            record = self.store.claim(self.owner, self.lease_s, skip=running_earlier)
            if record is None:
                return
            if record.unreadable:  # would fail on every run
                self.fail(record, record.attempt, UNREADABLE, record.error["message"])
                continue
            if record.attempt > self.max_attempts:
                cause = record.extras.get("last_error") or (
                    "its replica stopped renewing the lease (it died or stalled, e.g. killed while running it)")
                self.fail(record, record.attempt, "attempts_exhausted",
                          f"the job ran {record.attempt - 1} times without finishing (serve.max_attempts is "
                          f"{self.max_attempts}); the last run ended because {cause}")
                continue
            try:
                request = self.request_of(record)
            except (UserInputError, ValueError, TypeError, KeyError) as error:  # would fail on every run
                self.fail(record, record.attempt, "invalid_request", f"the request cannot run: {error}")
                continue
            with self.lock:
                self.ours[record.id] = record.attempt
                self.claimed_at[record.id] = time.time()
            try:
                self.engine.submit(request)
            except RuntimeError:  # the engine is shutting down: hand the job back at once
                with self.lock:
                    self.ours.pop(record.id, None)
                    self.claimed_at.pop(record.id, None)
                self._requeue(record.id, record.attempt, {"stage": "queued"})
                return

    # -- engine side ----------------------------------------------------------------------
    def on_event(self, event: RequestEvent) -> None:
        """On the engine's loop thread (or a submitting thread, for queued): never waits for the
        store (the progress writer takes the row update)."""
        if event.status in _FINAL_EVENTS:
            self.progress.forget(event.request_id)
            with self.lock:
                submitted = event.request_id in self.claimed_at
            if submitted:  # also when the job is no longer ours: its outcome must still be taken
                self.finished.put(event.request_id)
            return
        attempt = self.attempt(event.request_id)
        if attempt is None or event.status is RequestStatus.QUEUED:
            return  # not ours; or QUEUED, which the row already says
        self.progress.put(attempt, event)

    def _collect(self) -> None:
        while not (self.closing.is_set() and self.finished.empty()):
            try:
                video_id = self.finished.get(timeout=0.2)
            except queue.Empty:
                continue
            attempt = None
            try:
                # The final event precedes the outcome by a moment (both from the loop thread).
                outcome = self.engine.wait(video_id, timeout=60)
                attempt = self.attempt(video_id)
                if attempt is not None:  # else deleted or lost meanwhile: the outcome is dropped here
                    self.finish(outcome, attempt)
                del outcome
            except TimeoutError:
                _log.error("the engine reported %s finished but gave no outcome within 60 s", video_id)
                discard = getattr(self.engine, "discard", None)
                if discard is not None:
                    discard(video_id)
            except Exception as error:  # noqa: BLE001 - one bad outcome must not stop the collector
                _log.exception("could not record the outcome of %s", video_id)
                if attempt is not None:
                    self._hand_back(video_id, attempt, f"recording its result failed: {error}")
            with self.lock:
                if video_id not in self.unrecorded:  # else held until its final state is recorded
                    self.ours.pop(video_id, None)
                started = self.claimed_at.pop(video_id, None)
            if started is not None and attempt is not None:
                self.admission.job_finished(time.time() - started)
            self.wake.set()  # room for the next job

    def finish(self, outcome: VideoResult | RequestFailure, attempt: int) -> None:
        """Records an attempt's outcome, unless the attempt is no longer this replica's."""
        video_id = outcome.request_id
        record = self.store.get(video_id)
        if record is None or record.owner != self.owner or record.attempt != attempt:
            return  # deleted meanwhile, or re-queued after our lease lapsed
        extras = dict(record.extras)
        if isinstance(outcome, RequestFailure):
            if outcome.cancelled:
                self._final(video_id, attempt, status="cancelled", error=None,
                            extras=dict(extras, stage="cancelled", finished_at=time.time()))
                return
            # A request error is not retried by the engine; the code is the error's own
            # (non_finite_latents) or keeps the phase it failed in.
            self.fail(record, attempt, outcome.code, outcome.message)
            return
        self._complete(record, outcome, extras, attempt)

    def fail(self, record: JobRecord, attempt: int, code: str, message: str) -> bool | None:
        """Ends an attempt this replica owns as failed (final: never run again)."""
        _log.warning("job %s failed (%s): %s", record.id, code, message)
        return self._final(record.id, attempt, status="failed", error={"code": code, "message": message},
                           extras=dict(record.extras, stage="failed", finished_at=time.time()))

    def _final(self, video_id: str, attempt: int, **fields) -> bool | None:
        """Writes a final state of this replica's attempt: update_owned's answer, or None when the
        store could not take it (locked, full): it is then kept, the job held, and written again
        by the dispatcher thread until it is recorded or the attempt is no longer ours."""
        try:
            return self.store.update_owned(video_id, self.owner, attempt, **fields)
        except DBAPIError as error:
            _log.error("the final state of job %s (%s) could not be recorded (%s); it is kept and written again "
                       "until the store takes it", video_id, fields.get("status"), error.orig)
            with self.lock:
                self.unrecorded[video_id] = (attempt, fields)
                self.ours[video_id] = attempt  # its lease is renewed meanwhile
            return None

    def unrecorded_state(self, video_id: str) -> dict | None:
        """The final fields of a job this replica could not record yet (None: nothing pending)."""
        with self.lock:
            pending = self.unrecorded.get(video_id)
        return None if pending is None else pending[1]

    def _record_unrecorded(self) -> None:
        """Writes the kept final states again; each leaves the list once recorded, or once its
        attempt is no longer ours (deleted: its files go too; re-queued: it runs again)."""
        with self.lock:
            kept = dict(self.unrecorded)
        for video_id, (attempt, fields) in kept.items():
            try:
                done = self.store.update_owned(video_id, self.owner, attempt, **fields)
            except DBAPIError:
                continue  # still locked or full: next time
            with self.lock:
                if self.unrecorded.get(video_id, (None,))[0] == attempt:
                    del self.unrecorded[video_id]
                    if self.ours.get(video_id) == attempt:
                        del self.ours[video_id]
            if done:
                _log.info("the final state of job %s (%s) is recorded now", video_id, fields.get("status"))
            elif self.store.get(video_id) is None:
                self.sweeper.remove_files(video_id)
            self.wake.set()

    def _still_ours(self, video_id: str, attempt: int) -> bool:
        """Whether this replica still holds `attempt` of the job (its lease renewed); when the store
        takes no write (locked, full), whether the stored lease still holds."""
        try:
            return bool(self.store.heartbeat(self.owner, [video_id], self.lease_s))
        except DBAPIError:
            return self.store.lease_holds(video_id, self.owner, attempt)

    def _requeue(self, video_id: str, attempt: int, extras: dict) -> bool:
        """This replica's `attempt` of the job back to the queue at once (free for any replica), as
        a lapsed lease would; False if it is no longer that attempt's."""
        return self.store.update_owned(video_id, self.owner, attempt, status="queued", owner=None, lease_until=None,
                                       progress=0, extras=extras)

    def _hand_back(self, video_id: str, attempt: int, cause: str) -> None:
        """Queues an attempt that ended without a result again at once (instead of waiting for
        its lease to lapse), remembering why for the message if it runs out of attempts."""
        try:
            self._requeue(video_id, attempt, {"stage": "queued", "last_error": cause})
        except Exception:  # noqa: BLE001 - e.g. the database is down: the lease lapses instead
            _log.exception("could not hand job %s back to the queue", video_id)

    def _complete(self, record: JobRecord, result: VideoResult, extras: dict, attempt: int) -> None:
        started = time.perf_counter()
        target = self.sweeper.video_path(record.id)
        # Written under a name of this attempt, then renamed: a late writer of a lapsed attempt
        # never interleaves with the current owner's file (both hold the same seeded video).
        aside = self.sweeper.attempt_path(record.id, attempt)
        try:
            # Checked and fsynced, or raises; a model's sound is the mp4's AAC track.
            encode_mp4(result.frames, aside, fps=record.params["fps"], sound=result.sound)
        except VideoWriteError as error:
            self.fail(record, attempt, "write_failed", str(error))
            return
        now = time.time()
        timings = dict(result.timings, write_s=time.perf_counter() - started, total_s=now - record.created_at)
        with self.lock:
            if not self._still_ours(record.id, attempt):
                aside.unlink(missing_ok=True)
                return
            try:
                publish(aside, target)
            except VideoWriteError as error:
                aside.unlink(missing_ok=True)
                self.fail(record, attempt, "write_failed", str(error))
                return
            self.sweeper.remove_earlier_attempts(record.id, attempt)
            done = self._final(record.id, attempt, status="completed", progress=100, completed_at=now,
                               video_file=target.name, extras=dict(extras, stage="done", timings=timings,
                                                                   finished_at=now))
            if done is False and self.store.get(record.id) is None:  # deleted while the file was written
                self.sweeper.remove_files(record.id)
