"""JobService: the only thing the HTTP layer talks to. It checks requests, keeps every job in
the durable store, drives the engine core and turns its events and outcomes into job rows and
mp4 files. Testable without HTTP.

Threads: the engine's loop thread calls `_on_event` (fast: one row update); a collector thread
of ours takes each finished request's outcome from the engine and writes its mp4, so file I/O
never stalls the engine. HTTP threads call the public methods.

Invariants:
- a row is written before its request reaches the engine, and rows of unfinished jobs are
  submitted again by `recover()`: a job accepted is never lost;
- file names come from server-made ids only; no client string ever becomes a path;
- a final status (completed, failed, cancelled) is never overwritten by a late event.
"""

from __future__ import annotations

import logging
import math
import queue
import secrets
import threading
import time
from collections import deque
from pathlib import Path

from pipedit.config import GenerationDefaults
from pipedit.request import RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from pipedit.runtime.engine_core import EngineCore
from pipedit.video import write_mp4

from .errors import ApiError, not_found
from .params import ServiceLimits, ShapeValidator, resolve
from .schemas import FINAL_STATUSES, Video, VideoCreateParams, VideoDeleted, VideoList
from .store import UNFINISHED, JobRecord, JobStore
from .views import event_fields, to_video

_log = logging.getLogger(__name__)
DEFAULT_RETRY_AFTER_S = 10
_FINAL_EVENTS = (RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.CANCELLED)


class JobService:
    def __init__(self, engine: EngineCore, store: JobStore, data_dir: str | Path, model_name: str,
                 defaults: GenerationDefaults = GenerationDefaults(), limits: ServiceLimits = ServiceLimits(),
                 validate: ShapeValidator | None = None):
        """`engine` must be built without on_outcome: the service takes outcomes with engine.wait.
        `validate(VideoShape, steps)` is the model's own check (see pipedit.adapter.shape_validator)."""
        self.engine, self.store, self.model_name = engine, store, model_name
        self.defaults, self.limits, self._validate = defaults, limits, validate
        self.videos_dir = Path(data_dir) / "videos"
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # create (count, add, submit) and file removal vs. completion
        self._ours: set[str] = set()  # ids this service submitted (the engine may serve others)
        self._finished: queue.Queue[str] = queue.Queue()
        self._durations: deque[float] = deque(maxlen=20)
        self._closing = threading.Event()
        self._remove_listener = engine.add_listener(self._on_event)
        self._collector = threading.Thread(target=self._collect, name="pipedit-jobs", daemon=True)
        self._collector.start()

    # -- the API --------------------------------------------------------------------------
    def create(self, params: VideoCreateParams) -> Video:
        settings = resolve(params, self.model_name, self.defaults, self.limits, self._validate)
        with self._lock:
            queued = self.store.count("queued")
            if queued >= self.limits.max_queued:
                raise self._queue_full(queued)
            record = JobRecord(id=f"video_{secrets.token_hex(16)}", status="queued", created_at=time.time(),
                               params=settings.to_json(), extras={"stage": "queued"})
            self.store.add(record)
            try:
                self._submit(record)
            except RuntimeError as error:  # the engine is shutting down: do not keep a job it refused
                self.store.delete(record.id)
                self._ours.discard(record.id)
                raise ApiError(503, f"the server is shutting down ({error}); retry when /healthz is ok",
                               type="server_error", code="engine_unavailable") from error
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
        """Cancels the job if it is queued or running, then removes its row and files."""
        record = self._record(video_id)
        if record.status in UNFINISHED:
            self.engine.cancel(video_id)
        with self._lock:
            self.store.delete(video_id)
            self._remove_files(video_id)
        return VideoDeleted(id=video_id)

    cancel = delete

    def recover(self) -> int:
        """Submits every queued or in-progress job of the store again, oldest first (call once,
        at start). Returns how many."""
        records = self.store.unfinished()
        for record in records:
            self.store.update(record.id, status="queued", progress=0, extras={"stage": "queued"})
            self._submit(record)
        return len(records)

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
            "max_fps": limits.max_fps,
            "max_guidance_scale": limits.max_guidance_scale,
            "max_prompt_chars": limits.max_prompt_chars,
        }

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
        """Stops listening and collecting; the engine is the caller's to close afterwards. Jobs
        still unfinished stay so in the store, and `recover()` runs them after a restart."""
        self._remove_listener()
        self._closing.set()
        self._collector.join(timeout=30)

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

    def _submit(self, record: JobRecord) -> None:
        p = record.params
        self._ours.add(record.id)
        self.engine.submit(VideoRequest(p["prompt"], height=p["height"], width=p["width"],
                                        num_frames=p["num_frames"], steps=p["num_inference_steps"],
                                        guidance_scale=p["guidance_scale"], seed=p["seed"], request_id=record.id))

    def _queue_full(self, queued: int) -> ApiError:
        average = sum(self._durations) / len(self._durations) if self._durations else DEFAULT_RETRY_AFTER_S
        retry = max(1, math.ceil(average))
        return ApiError(429, f"{queued} videos are queued, the most this server takes; retry in about {retry} s",
                        code="queue_full", type="rate_limit_error", headers={"Retry-After": str(retry)})

    def _remove_files(self, video_id: str) -> None:
        for name in (f"{video_id}.mp4", f".{video_id}.mp4.partial.mp4"):
            (self.videos_dir / name).unlink(missing_ok=True)

    # -- engine side ----------------------------------------------------------------------
    def _on_event(self, event: RequestEvent) -> None:
        """On the engine's loop thread (or a submitting thread, for queued): keep it short."""
        if event.request_id not in self._ours or event.status is RequestStatus.QUEUED:
            return  # the row is written queued before submit; a late QUEUED event must not regress it
        if event.status in _FINAL_EVENTS:
            self._finished.put(event.request_id)
            return
        record = self.store.get(event.request_id)
        if record is None or record.status in FINAL_STATUSES:
            return
        fields = event_fields(event, record)
        if fields:
            self.store.update(record.id, **fields)

    def _collect(self) -> None:
        while not (self._closing.is_set() and self._finished.empty()):
            try:
                video_id = self._finished.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                # The final event precedes the outcome by a moment (both from the loop thread).
                self._finish(self.engine.wait(video_id, timeout=60))
            except Exception:  # noqa: BLE001 - one bad outcome must not stop the collector
                _log.exception("could not record the outcome of %s", video_id)
            self._ours.discard(video_id)

    def _finish(self, outcome: VideoResult | RequestFailure) -> None:
        video_id = outcome.request_id
        record = self.store.get(video_id)
        if record is None:
            return  # deleted meanwhile
        extras = dict(record.extras)
        if isinstance(outcome, RequestFailure):
            status = "cancelled" if outcome.cancelled else "failed"
            error = None if outcome.cancelled else {"code": f"{outcome.phase}_failed", "message": outcome.message}
            self.store.update(video_id, status=status, error=error, extras=dict(extras, stage=status))
            return
        self._complete(record, outcome, extras)

    def _complete(self, record: JobRecord, result: VideoResult, extras: dict) -> None:
        started = time.perf_counter()
        name = f"{record.id}.mp4"
        write_mp4(result.frames, self.videos_dir / name, fps=record.params["fps"])  # aside, then renamed
        now = time.time()
        timings = dict(result.timings, write_s=time.perf_counter() - started, total_s=now - record.created_at)
        with self._lock:
            done = self.store.update(record.id, status="completed", progress=100, completed_at=now, video_file=name,
                                     extras=dict(extras, stage="done", timings=timings))
            if not done:  # deleted while the file was written
                self._remove_files(record.id)
        self._durations.append(now - extras.get("started_at", record.created_at))
