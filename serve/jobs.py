"""JobService: the only thing the HTTP layer talks to. It checks requests, keeps every job in
the durable store, takes jobs from the store for its engine core and turns the engine's events
and outcomes into job rows and mp4 files. Testable without HTTP.

Several services (replicas) may share one store and one data folder: each takes jobs with
`store.claim` and writes a job's row only while it owns that attempt (see store.py).

Threads: the engine's loop thread calls `_on_event` (fast: one row update); a collector thread
takes each finished request's outcome from the engine and writes its mp4, so file I/O never
stalls the engine; a dispatcher thread claims jobs when the engine has room, renews the leases
of the jobs it runs, re-queues jobs of replicas that died and sweeps expired jobs (retention)
and stale temporary files. HTTP threads call the public methods.

Failures: a job runs at most `max_attempts` times (each claim is one; a run ends without a
result when its replica dies or stalls and the lease lapses), then it fails with the cause
(`attempts_exhausted`). A request error (the request itself is bad) and an mp4 that cannot be
written (`write_failed`, e.g. a full disk) fail the job at once.

Files: a job's mp4 is `{id}.mp4`; while written it is `.{id}.attempt{N}.mp4` (checked and
fsynced before the rename), so DELETE's `.{id}.*` covers every file of a job.

Invariants:
- a row is written queued before any engine sees it; a job is never lost: its owner's lease
  lapses when the owner dies, and any replica then re-queues it;
- file names come from server-made ids only; no client string ever becomes a path;
- a final status (completed, failed, cancelled) is never overwritten, neither by a late event
  nor by a late result of an attempt whose lease lapsed;
- every request submitted to the engine has its outcome taken (`engine.wait`), also when its
  job was deleted or lost meanwhile: the engine keeps no decoded video for nobody.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import secrets
import socket
import threading
import time
from pathlib import Path

from pipedit.config import GenerationDefaults, ServeConfig
from pipedit.errors import UserInputError
from pipedit.request import RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from pipedit.runtime.engine_core import EngineCore
from pipedit.video import VideoWriteError, encode_mp4, publish

from .admission import Admission, client_of
from .errors import ApiError, not_found
from .options import create_options
from .params import ServiceLimits, ShapeValidator, request_values, resolve
from .schemas import Video, VideoCreateParams, VideoDeleted, VideoList
from .store import UNFINISHED, JobRecord, JobStore
from .views import event_fields, to_video

_log = logging.getLogger(__name__)
DEFAULT_LEASE_S = 20.0
CLAIM_POLL_S = 0.5  # how often an idle replica looks for jobs other replicas admitted
MAX_HELD = 3  # jobs one replica holds at once: one decoding, one denoising, one waiting in the engine
_FINAL_EVENTS = (RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.CANCELLED)
SWEEP_EVERY_S = 60.0  # expired jobs and stale temporary files are looked for this often (at most)
# Temporary files of a job: `.{id}.attempt{N}.mp4`, and older versions' `..{id}.attempt{N}.mp4.partial.mp4`.
_TEMP = re.compile(r"^\.{1,2}(?P<id>video_[0-9a-f]+)\.attempt(?P<attempt>\d+)\.mp4(\.partial\.mp4)?$")


def new_owner_id() -> str:
    """Unique per process lifetime: a restarted replica never passes for its former self."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class JobService:
    def __init__(self, engine: EngineCore, store: JobStore, data_dir: str | Path, model_name: str,
                 defaults: GenerationDefaults = GenerationDefaults(), limits: ServiceLimits = ServiceLimits(),
                 validate: ShapeValidator | None = None, *, lease_s: float = DEFAULT_LEASE_S,
                 replicas: int = 1, owner: str | None = None, max_attempts: int = ServeConfig.max_attempts,
                 retention: float = ServeConfig.retention):
        """`engine` must be built without on_outcome: the service takes outcomes with engine.wait.
        `validate(VideoShape, steps)` is the model's own check (see pipedit.adapter.shape_validator).
        `lease_s`: a job whose owner has not renewed it for this long goes back to the queue.
        `max_attempts`: runs of one job before it fails. `retention`: seconds a finished job and
        its video are kept (0: forever)."""
        self.engine, self.store, self.model_name = engine, store, model_name
        self.defaults, self.limits, self._validate = defaults, limits, validate
        self.lease_s, self.owner = lease_s, owner or new_owner_id()
        self.max_attempts, self.retention = max(1, int(max_attempts)), float(retention)
        self.admission = Admission(store, limits, replicas)
        self.videos_dir = Path(data_dir) / "videos"
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # file removal vs. completion; `_ours`
        self._admit = threading.Lock()
        self._ours: dict[str, int] = {}  # job id -> the attempt this service runs
        self._claimed_at: dict[str, float] = {}  # job id -> when submitted; until its outcome is taken
        self._finished: queue.Queue[str] = queue.Queue()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self.remove_stale_files()  # before this service writes any
        self._remove_listener = engine.add_listener(self._on_event)
        self._threads = [threading.Thread(target=self._collect, name="pipedit-jobs", daemon=True),
                         threading.Thread(target=self._dispatch, name="pipedit-claims", daemon=True)]
        for thread in self._threads:
            thread.start()

    # -- the API --------------------------------------------------------------------------
    def create(self, params: VideoCreateParams, api_key: str | None = None, image: bytes | None = None) -> Video:
        """Checks and stores a job; some replica's dispatcher runs it. 429 when queues are full.
        `image`: the input_reference's encoded bytes (image-to-video), stored with the job."""
        settings = resolve(params, self.model_name, self.defaults, self.limits, self._validate, image)
        if not self.healthy():
            raise ApiError(503, "the server is shutting down; retry when /healthz is ok", type="server_error",
                           code="engine_unavailable")
        client = client_of(api_key)
        with self._admit:  # count and add together, for this process (across replicas see admission.py)
            self.admission.check(client)
            record = JobRecord(id=f"video_{secrets.token_hex(16)}", status="queued", created_at=time.time(),
                               params=settings.to_json(), extras={"stage": "queued"}, client=client)
            self.store.add(record, image=image)
        self._wake.set()
        return self.view(record)

    def get(self, video_id: str) -> Video:
        return self.view(self._record(video_id))

    def list(self, limit: int = 20, order: str = "desc", after: str | None = None,
             client: str | None = None) -> VideoList:
        """A page of jobs; `client`: only that key's (None: every job)."""
        if not 1 <= limit <= 100:
            raise ApiError(400, f"limit must be between 1 and 100, got {limit}", param="limit", code="invalid_value")
        try:
            records, more = self.store.list(limit, order, after, client=client)
        except KeyError:
            raise ApiError(400, f"after: no video with id '{after}'", param="after", code="invalid_value") from None
        except ValueError as error:
            raise ApiError(400, str(error), param="order", code="invalid_value") from None
        data = [self.view(r) for r in records]
        return VideoList(data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None,
                         has_more=more)

    def content_path(self, video_id: str) -> Path:
        """The finished mp4; 404 video_not_ready while the job has not completed."""
        record = self._record(video_id)
        path = self.videos_dir / record.video_file if record.video_file else None
        if record.status != "completed" or path is None or not path.is_file():
            raise ApiError(404, f"video '{video_id}' is {record.status}, not completed: poll GET /v1/videos/"
                           f"{video_id} until its status is completed", param="video_id", code="video_not_ready")
        return path

    def delete(self, video_id: str) -> VideoDeleted:
        """Cancels the job if it is queued or running, then removes its row and files. A job
        running on another replica stops there at its next heartbeat (its row is gone)."""
        record = self._record(video_id)
        if record.status in UNFINISHED and video_id in self._ours:
            self.engine.cancel(video_id)
        with self._lock:
            self.store.delete(video_id)
            self._remove_files(video_id)
        return VideoDeleted(id=video_id)

    cancel = delete

    def recover(self) -> int:
        """Re-queues jobs whose owner's lease lapsed (a replica, or this server before a restart,
        died holding them); the dispatcher then runs them. Returns how many."""
        freed = self.store.requeue_expired()
        if freed:
            _log.warning("re-queued %d job(s) whose owner stopped renewing them: %s", len(freed), freed)
            self._wake.set()
        return len(freed)

    def sweep(self, now: float | None = None) -> list[str]:
        """Deletes the jobs (row and files) that finished more than `retention` seconds before
        `now` (default: the time), and stale temporary files; returns the deleted ids."""
        self.remove_stale_files()
        if self.retention <= 0:
            return []
        expired = self.store.finished_before((time.time() if now is None else now) - self.retention)
        for video_id in expired:
            with self._lock:
                self.store.delete(video_id)
                self._remove_files(video_id)
        if expired:
            _log.info("deleted %d job(s) finished more than %.0f s ago", len(expired), self.retention)
        return expired

    def remove_stale_files(self) -> int:
        """Removes temporary mp4 files no run is writing (a crash left them): those of jobs that
        are gone, finished, or on a later attempt. Never a finished video. Returns how many."""
        removed = 0
        for path in self.videos_dir.glob(".*"):
            match = _TEMP.match(path.name)
            if match is None or not path.is_file():
                continue
            record = self.store.get(match["id"])
            if record is not None and record.status in UNFINISHED and record.attempt == int(match["attempt"]):
                continue  # the current attempt: some replica may be writing it right now
            path.unlink(missing_ok=True)
            removed += 1
        if removed:
            _log.info("removed %d stale temporary video file(s) from %s", removed, self.videos_dir)
        return removed

    def options(self) -> dict:
        """What a create request may ask for: the model, its defaults and the allowed values."""
        model = getattr(self._validate, "__self__", None)  # the adapter, when validate is its method
        return create_options(self.model_name, model, self.defaults, self.limits)

    def healthy(self) -> bool:
        """Whether the engine can take work."""
        return not self._closing.is_set() and self.engine.accepting

    def health(self) -> tuple[str, str | None]:
        """("ok" | "degraded" | "down", reason): degraded while the engine rebuilds its rank group
        (jobs are still taken and wait in the queue)."""
        if not self.healthy():
            return "down", "the engine cannot take work"
        return getattr(self.engine, "health", ("ok", None))

    def close(self) -> None:
        """Stops claiming, listening and collecting, and hands the jobs it holds back to the
        queue (another replica, or this one after a restart, runs them). The engine is the
        caller's to close afterwards."""
        self._remove_listener()
        self._closing.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)
        with self._lock:
            self._ours.clear()
        self.store.release(self.owner)

    def shutdown(self) -> None:
        """close(), then the engine and the store (for owners of all three, e.g. open_service)."""
        self.close()
        self.engine.close()
        self.store.close()

    # -- helpers --------------------------------------------------------------------------
    def _record(self, video_id: str) -> JobRecord:
        record = self.store.get(video_id)
        if record is None:
            raise not_found(video_id)
        return record

    def view(self, record: JobRecord) -> Video:
        position = self.store.queue_position(record) if record.status == "queued" else None
        return to_video(record, self.model_name, position, retention=self.retention)

    def _attempt(self, video_id: str) -> int | None:
        with self._lock:
            return self._ours.get(video_id)

    def _remove_files(self, video_id: str) -> None:
        (self.videos_dir / f"{video_id}.mp4").unlink(missing_ok=True)
        for partial in self.videos_dir.glob(f".{video_id}.*"):
            partial.unlink(missing_ok=True)

    # -- the dispatcher thread ------------------------------------------------------------
    def _dispatch(self) -> None:
        beat_every = self.lease_s / 4
        sweep_every = min(SWEEP_EVERY_S, self.retention / 2) if self.retention > 0 else SWEEP_EVERY_S
        next_beat, next_sweep = 0.0, time.monotonic() + min(sweep_every, 1.0)
        while not self._closing.is_set():
            try:
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + beat_every
                    self._heartbeat()
                    self.recover()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + sweep_every
                    self.sweep()
                self._take_jobs()
            except Exception:  # noqa: BLE001 - e.g. the database restarting; try again shortly
                _log.exception("job dispatch failed; retrying")
            self._wake.wait(min(CLAIM_POLL_S, beat_every, sweep_every))
            self._wake.clear()

    def _heartbeat(self) -> None:
        if not self.engine.accepting:
            return  # no renewal while the engine cannot work: the leases lapse and other replicas take over
        with self._lock:
            held = set(self._ours)
        lost = held - self.store.heartbeat(self.owner, held, self.lease_s)
        for video_id in lost:  # deleted, or taken back after a stall: stop spending ranks on it
            _log.warning("job %s is no longer ours (deleted or re-queued); cancelling it here", video_id)
            with self._lock:
                self._ours.pop(video_id, None)
            self.engine.cancel(video_id)

    def _take_jobs(self) -> None:
        while not self._closing.is_set() and self.engine.accepting:
            with self._lock:
                if len(self._ours) >= MAX_HELD or getattr(self.engine, "queue_length", 0) > 0:
                    return
            record = self.store.claim(self.owner, self.lease_s)
            if record is None:
                return
            if record.attempt > self.max_attempts:
                cause = record.extras.get("last_error") or (
                    "its replica stopped renewing the lease (it died or stalled, e.g. killed while running it)")
                self._fail(record, record.attempt, "attempts_exhausted",
                           f"the job ran {record.attempt - 1} times without finishing (serve.max_attempts is "
                           f"{self.max_attempts}); the last run ended because {cause}")
                continue
            try:
                request = self._request_of(record)
            except (UserInputError, ValueError, TypeError, KeyError) as error:  # would fail on every run
                self._fail(record, record.attempt, "invalid_request", f"the request cannot run: {error}")
                continue
            with self._lock:
                self._ours[record.id] = record.attempt
                self._claimed_at[record.id] = time.time()
            try:
                self.engine.submit(request)
            except RuntimeError:  # the engine is shutting down: hand the job back at once
                with self._lock:
                    self._ours.pop(record.id, None)
                    self._claimed_at.pop(record.id, None)
                self._requeue(record.id, record.attempt, {"stage": "queued"})
                return

    def _request_of(self, record: JobRecord) -> VideoRequest:
        """The engine request of a stored job (on every attempt, also after a restart: the
        input_reference image comes from the store)."""
        p = record.params
        image = None
        if p.get("image"):
            image = self.store.image(record.id)
            if image is None:
                raise ValueError("its input_reference image is missing from the job store")
        return VideoRequest(**request_values(p), request_id=record.id, image=image)

    # -- engine side ----------------------------------------------------------------------
    def _on_event(self, event: RequestEvent) -> None:
        """On the engine's loop thread (or a submitting thread, for queued): keep it short."""
        if event.status in _FINAL_EVENTS:
            with self._lock:
                submitted = event.request_id in self._claimed_at
            if submitted:  # also when the job is no longer ours: its outcome must still be taken
                self._finished.put(event.request_id)
            return
        attempt = self._attempt(event.request_id)
        if attempt is None or event.status is RequestStatus.QUEUED:
            return  # not ours; or QUEUED, which the row already says
        record = self.store.get(event.request_id)
        fields = event_fields(event, record) if record is not None else None
        if fields:
            self.store.update_owned(record.id, self.owner, attempt, **fields)

    def _collect(self) -> None:
        while not (self._closing.is_set() and self._finished.empty()):
            try:
                video_id = self._finished.get(timeout=0.2)
            except queue.Empty:
                continue
            attempt = None
            try:
                # The final event precedes the outcome by a moment (both from the loop thread).
                outcome = self.engine.wait(video_id, timeout=60)
                attempt = self._attempt(video_id)
                if attempt is not None:  # else deleted or lost meanwhile: the outcome is dropped here
                    self._finish(outcome, attempt)
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
            with self._lock:
                self._ours.pop(video_id, None)
                started = self._claimed_at.pop(video_id, None)
            if started is not None and attempt is not None:
                self.admission.job_finished(time.time() - started)
            self._wake.set()  # room for the next job

    def _finish(self, outcome: VideoResult | RequestFailure, attempt: int) -> None:
        video_id = outcome.request_id
        record = self.store.get(video_id)
        if record is None or record.owner != self.owner or record.attempt != attempt:
            return  # deleted meanwhile, or re-queued after our lease lapsed
        extras = dict(record.extras)
        if isinstance(outcome, RequestFailure):
            if outcome.cancelled:
                self.store.update_owned(video_id, self.owner, attempt, status="cancelled", error=None,
                                        extras=dict(extras, stage="cancelled", finished_at=time.time()))
                return
            # A request error is not retried by the engine; the code keeps the phase it failed in.
            self._fail(record, attempt, f"{outcome.phase}_failed", outcome.message)
            return
        self._complete(record, outcome, extras, attempt)

    def _fail(self, record: JobRecord, attempt: int, code: str, message: str) -> bool:
        """Ends an attempt this service owns as failed (final: never run again)."""
        _log.warning("job %s failed (%s): %s", record.id, code, message)
        return self.store.update_owned(record.id, self.owner, attempt, status="failed",
                                       error={"code": code, "message": message},
                                       extras=dict(record.extras, stage="failed", finished_at=time.time()))

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
        name = f"{record.id}.mp4"
        # Written under a name of this attempt, then renamed: a late writer of a lapsed attempt
        # never interleaves with the current owner's file (both hold the same seeded video).
        aside = self.videos_dir / f".{record.id}.attempt{attempt}.mp4"
        try:
            encode_mp4(result.frames, aside, fps=record.params["fps"])  # checked and fsynced, or raises
        except VideoWriteError as error:
            self._fail(record, attempt, "write_failed", str(error))
            return
        now = time.time()
        timings = dict(result.timings, write_s=time.perf_counter() - started, total_s=now - record.created_at)
        with self._lock:
            if not self.store.heartbeat(self.owner, [record.id], self.lease_s):  # no longer ours
                aside.unlink(missing_ok=True)
                return
            try:
                publish(aside, self.videos_dir / name)
            except VideoWriteError as error:
                aside.unlink(missing_ok=True)
                self._fail(record, attempt, "write_failed", str(error))
                return
            done = self.store.update_owned(record.id, self.owner, attempt, status="completed", progress=100,
                                           completed_at=now, video_file=name,
                                           extras=dict(extras, stage="done", timings=timings, finished_at=now))
            if not done and self.store.get(record.id) is None:  # deleted while the file was written
                self._remove_files(record.id)
