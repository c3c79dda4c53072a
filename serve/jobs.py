"""JobService: the only thing the HTTP layer talks to. It checks requests, keeps every job in
the durable store, takes jobs from the store for its engine core and turns the engine's events
and outcomes into job rows and mp4 files. Testable without HTTP.

Several services (replicas) may share one store and one data folder: each takes jobs with
`store.claim` and writes a job's row only while it owns that attempt (see store.py).

Threads: the engine's loop thread calls `_on_event` (fast: one row update); a collector thread
takes each finished request's outcome from the engine and writes its mp4, so file I/O never
stalls the engine; a dispatcher thread claims jobs when the engine has room, renews the leases
of the jobs it runs and re-queues jobs of replicas that died. HTTP threads call the public methods.

Invariants:
- a row is written queued before any engine sees it; a job is never lost: its owner's lease
  lapses when the owner dies, and any replica then re-queues it;
- file names come from server-made ids only; no client string ever becomes a path;
- a final status (completed, failed, cancelled) is never overwritten, neither by a late event
  nor by a late result of an attempt whose lease lapsed.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
import time
from pathlib import Path

from pipedit.config import GenerationDefaults
from pipedit.request import RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from pipedit.runtime.engine_core import EngineCore
from pipedit.video import write_mp4

from .admission import Admission, client_of
from .errors import ApiError, not_found
from .params import ServiceLimits, ShapeValidator, resolve
from .schemas import Video, VideoCreateParams, VideoDeleted, VideoList
from .store import UNFINISHED, JobRecord, JobStore
from .views import event_fields, to_video

_log = logging.getLogger(__name__)
DEFAULT_LEASE_S = 20.0
CLAIM_POLL_S = 0.5  # how often an idle replica looks for jobs other replicas admitted
MAX_HELD = 3  # jobs one replica holds at once: one decoding, one denoising, one waiting in the engine
_FINAL_EVENTS = (RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.CANCELLED)


def new_owner_id() -> str:
    """Unique per process lifetime: a restarted replica never passes for its former self."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class JobService:
    def __init__(self, engine: EngineCore, store: JobStore, data_dir: str | Path, model_name: str,
                 defaults: GenerationDefaults = GenerationDefaults(), limits: ServiceLimits = ServiceLimits(),
                 validate: ShapeValidator | None = None, *, lease_s: float = DEFAULT_LEASE_S,
                 replicas: int = 1, owner: str | None = None):
        """`engine` must be built without on_outcome: the service takes outcomes with engine.wait.
        `validate(VideoShape, steps)` is the model's own check (see pipedit.adapter.shape_validator).
        `lease_s`: a job whose owner has not renewed it for this long goes back to the queue."""
        self.engine, self.store, self.model_name = engine, store, model_name
        self.defaults, self.limits, self._validate = defaults, limits, validate
        self.lease_s, self.owner = lease_s, owner or new_owner_id()
        self.admission = Admission(store, limits, replicas)
        self.videos_dir = Path(data_dir) / "videos"
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # file removal vs. completion; `_ours`
        self._admit = threading.Lock()
        self._ours: dict[str, int] = {}  # job id -> the attempt this service runs
        self._claimed_at: dict[str, float] = {}
        self._finished: queue.Queue[str] = queue.Queue()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._remove_listener = engine.add_listener(self._on_event)
        self._threads = [threading.Thread(target=self._collect, name="pipedit-jobs", daemon=True),
                         threading.Thread(target=self._dispatch, name="pipedit-claims", daemon=True)]
        for thread in self._threads:
            thread.start()

    # -- the API --------------------------------------------------------------------------
    def create(self, params: VideoCreateParams, api_key: str | None = None) -> Video:
        """Checks and stores a job; some replica's dispatcher runs it. 429 when queues are full."""
        settings = resolve(params, self.model_name, self.defaults, self.limits, self._validate)
        if not self.healthy():
            raise ApiError(503, "the server is shutting down; retry when /healthz is ok", type="server_error",
                           code="engine_unavailable")
        client = client_of(api_key)
        with self._admit:  # count and add together, for this process (across replicas see admission.py)
            self.admission.check(client)
            record = JobRecord(id=f"video_{secrets.token_hex(16)}", status="queued", created_at=time.time(),
                               params=settings.to_json(), extras={"stage": "queued"}, client=client)
            self.store.add(record)
        self._wake.set()
        return self._view(record)

    def get(self, video_id: str) -> Video:
        return self._view(self._record(video_id))

    def list(self, limit: int = 20, order: str = "desc", after: str | None = None) -> VideoList:
        if not 1 <= limit <= 100:
            raise ApiError(400, f"limit must be between 1 and 100, got {limit}", param="limit", code="invalid_value")
        try:
            records, more = self.store.list(limit, order, after)
        except KeyError:
            raise ApiError(400, f"after: no video with id '{after}'", param="after", code="invalid_value") from None
        except ValueError as error:
            raise ApiError(400, str(error), param="order", code="invalid_value") from None
        data = [self._view(r) for r in records]
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

    def options(self) -> dict:
        """What a create request may ask for: the model, its defaults and the allowed values."""
        model = getattr(self._validate, "__self__", None)  # the adapter, when validate is its method
        d, limits = self.defaults, self.limits
        return {
            "model": self.model_name,
            "defaults": {"width": d.width, "height": d.height, "num_frames": d.num_frames, "fps": d.fps,
                         "num_inference_steps": d.steps, "guidance_scale": d.guidance_scale, "seed": d.seed},
            "size_multiple": int(getattr(model, "size_multiple", 1)),
            "max_side": limits.max_side,
            "frame_counts": list(range(1, limits.max_frames + 1, int(getattr(model, "temporal_ratio", 1)))),
            "max_frames": limits.max_frames,
            "max_steps": limits.max_steps,
            "max_cost": limits.max_cost,
            "max_fps": limits.max_fps,
            "max_guidance_scale": limits.max_guidance_scale,
            "max_prompt_chars": limits.max_prompt_chars,
        }

    def healthy(self) -> bool:
        """Whether the engine can take work."""
        return not self._closing.is_set() and self.engine.accepting

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

    def _view(self, record: JobRecord) -> Video:
        position = self.store.queue_position(record) if record.status == "queued" else None
        return to_video(record, self.model_name, position)

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
        next_beat = 0.0
        while not self._closing.is_set():
            try:
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + beat_every
                    self._heartbeat()
                    self.recover()
                self._take_jobs()
            except Exception:  # noqa: BLE001 - e.g. the database restarting; try again shortly
                _log.exception("job dispatch failed; retrying")
            self._wake.wait(min(CLAIM_POLL_S, beat_every))
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
            with self._lock:
                self._ours[record.id] = record.attempt
                self._claimed_at[record.id] = time.time()
            p = record.params
            try:
                self.engine.submit(VideoRequest(
                    p["prompt"], height=p["height"], width=p["width"], num_frames=p["num_frames"],
                    steps=p["num_inference_steps"], guidance_scale=p["guidance_scale"], seed=p["seed"],
                    request_id=record.id))
            except RuntimeError:  # the engine is shutting down: hand the job back at once
                with self._lock:
                    self._ours.pop(record.id, None)
                    self._claimed_at.pop(record.id, None)
                self.store.update_owned(record.id, self.owner, record.attempt, owner=None, lease_until=None)
                return

    # -- engine side ----------------------------------------------------------------------
    def _on_event(self, event: RequestEvent) -> None:
        """On the engine's loop thread (or a submitting thread, for queued): keep it short."""
        attempt = self._attempt(event.request_id)
        if attempt is None or event.status is RequestStatus.QUEUED:
            return  # not ours; or QUEUED, which the row already says
        if event.status in _FINAL_EVENTS:
            self._finished.put(event.request_id)
            return
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
            try:
                # The final event precedes the outcome by a moment (both from the loop thread).
                outcome = self.engine.wait(video_id, timeout=60)
                attempt = self._attempt(video_id)
                if attempt is not None:
                    self._finish(outcome, attempt)
            except Exception:  # noqa: BLE001 - one bad outcome must not stop the collector
                _log.exception("could not record the outcome of %s", video_id)
            with self._lock:
                self._ours.pop(video_id, None)
                started = self._claimed_at.pop(video_id, None)
            if started is not None:
                self.admission.job_finished(time.time() - started)
            self._wake.set()  # room for the next job

    def _finish(self, outcome: VideoResult | RequestFailure, attempt: int) -> None:
        video_id = outcome.request_id
        record = self.store.get(video_id)
        if record is None or record.owner != self.owner or record.attempt != attempt:
            return  # deleted meanwhile, or re-queued after our lease lapsed
        extras = dict(record.extras)
        if isinstance(outcome, RequestFailure):
            status = "cancelled" if outcome.cancelled else "failed"
            error = None if outcome.cancelled else {"code": f"{outcome.phase}_failed", "message": outcome.message}
            self.store.update_owned(video_id, self.owner, attempt, status=status, error=error,
                                    extras=dict(extras, stage=status))
            return
        self._complete(record, outcome, extras, attempt)

    def _complete(self, record: JobRecord, result: VideoResult, extras: dict, attempt: int) -> None:
        started = time.perf_counter()
        name = f"{record.id}.mp4"
        # Written under a name of this attempt, then renamed: a late writer of a lapsed attempt
        # never interleaves with the current owner's file (both hold the same seeded video).
        aside = write_mp4(result.frames, self.videos_dir / f".{record.id}.attempt{attempt}.mp4",
                          fps=record.params["fps"])
        now = time.time()
        timings = dict(result.timings, write_s=time.perf_counter() - started, total_s=now - record.created_at)
        with self._lock:
            if self.store.heartbeat(self.owner, [record.id], self.lease_s):  # still ours: publish the file
                os.replace(aside, self.videos_dir / name)
            else:
                aside.unlink(missing_ok=True)
                return
            done = self.store.update_owned(record.id, self.owner, attempt, status="completed", progress=100,
                                           completed_at=now, video_file=name,
                                           extras=dict(extras, stage="done", timings=timings))
            if not done and self.store.get(record.id) is None:  # deleted while the file was written
                self._remove_files(record.id)
