"""JobService: the only thing the HTTP layer talks to. It checks requests, keeps every job in
the durable store and answers from it; its dispatcher (dispatcher.py) takes jobs from the store
for its engine loop and turns the engine's events and outcomes into job rows and mp4 files, and
its sweeper (sweeper.py) removes expired jobs and stale files. Testable without HTTP.

Several services (replicas) may share one store and one data folder: each takes jobs with
`store.claim` and writes a job's row only while it owns that attempt (see store.py).

Threads: the dispatcher's (see dispatcher.py); HTTP threads call the public methods.

Invariants:
- a row is written queued before any engine sees it; a job is never lost (dispatcher.py);
- file names come from server-made ids only; no client string ever becomes a path (sweeper.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

from pipedit.config import GenerationDefaults, ServeConfig
from pipedit.lora.spec import NO_LORAS, LoraOffer
from pipedit.request import VideoRequest
from pipedit.runtime.engine_loop import EngineLoop

from ..contract.errors import ApiError, not_found, storage_full
from ..contract.options import create_options
from ..contract.params import ServiceLimits, ShapeValidator, request_values, resolve
from ..contract.schemas import Video, VideoCreateParams, VideoDeleted, VideoList
from .admission import Admission, client_of
from .dispatcher import Dispatcher
from .events import EventHub
from .store import UNFINISHED, JobRecord, JobStore
from .sweeper import FileSweeper
from .views import to_video

DEFAULT_LEASE_S = 20.0
MIN_FREE_BYTES = 64 << 20  # /healthz is degraded while the videos' disk has less free


def new_owner_id() -> str:
    """Unique per process lifetime: a restarted replica never passes for its former self."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class JobService:
    def __init__(self, engine: EngineLoop, store: JobStore, data_dir: str | Path, model_name: str,
                 defaults: GenerationDefaults = GenerationDefaults(), limits: ServiceLimits = ServiceLimits(),
                 validate: ShapeValidator | None = None, *, lease_s: float = DEFAULT_LEASE_S,
                 replicas: int = 1, owner: str | None = None, max_attempts: int = ServeConfig.max_attempts,
                 retention: float = ServeConfig.retention, loras: LoraOffer = NO_LORAS):
        """`engine` must be built without on_outcome: the service takes outcomes with engine.wait.
        `validate(VideoShape, steps)` is the model's own check (see pipedit.adapter.shape_validator).
        `lease_s`: a job whose owner has not renewed it for this long goes back to the queue.
        `max_attempts`: runs of one job before it fails. `retention`: seconds a finished job and
        its video are kept (0: forever). `loras`: the adapters requests may choose by name."""
        self.engine, self.store, self.model_name = engine, store, model_name
        self.defaults, self.limits, self._validate, self.loras = defaults, limits, validate, loras
        self.lease_s, self.owner, self.replicas = lease_s, owner or new_owner_id(), replicas
        self.max_attempts, self.retention = max(1, int(max_attempts)), float(retention)
        self.admission = Admission(store, limits, replicas)
        self.videos_dir = Path(data_dir) / "videos"
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        # A job's file removal vs. its completion; the dispatcher's jobs. Reentrant: a completion
        # that holds it may keep its final state for later (Dispatcher._final).
        lock = threading.RLock()
        self._admit = threading.Lock()
        self.sweeper = FileSweeper(store, self.videos_dir, self.retention, lock)
        self.sweeper.remove_stale_files()  # before this service writes any
        self.dispatcher = Dispatcher(engine, store, self.owner, lease_s=lease_s, max_attempts=self.max_attempts,
                                     admission=self.admission, sweeper=self.sweeper, request_of=self._request_of,
                                     lock=lock)
        # The /events streams' one watcher and their caps (the limits' event-stream fields);
        # replace it before the first stream opens to set other limits.
        self.events = EventHub.for_service(self)
        self.dispatcher.start()

    # -- the API --------------------------------------------------------------------------
    def create(self, params: VideoCreateParams, api_key: str | None = None, image: bytes | None = None, *,
               job_id: str | None = None, request_digest: str | None = None) -> Video:
        """Checks and stores a job; some replica's dispatcher runs it. 429 when queues are full.
        `image`: the input_reference's encoded bytes (image-to-video), stored with the job.
        `job_id`, `request_digest`: an idempotent create's (see http/idempotency.py); the store refuses
        a second row with that id (sqlalchemy IntegrityError)."""
        settings = resolve(params, self.model_name, self.defaults, self.limits, self._validate, image, self.loras)
        if not self.healthy():
            raise ApiError(503, "the server is shutting down; retry when /healthz is ok", type="server_error",
                           code="engine_unavailable")
        if (room := self.low_disk()) is not None:  # a store that is full answers its own write (507)
            raise storage_full(room)
        client = client_of(api_key)
        with self._admit:  # count and add together, for this process (across replicas see admission.py)
            self.admission.check(client)
            stored = dict(settings.to_json(), **({"request_digest": request_digest} if request_digest else {}))
            record = JobRecord(id=job_id or f"video_{secrets.token_hex(16)}", status="queued", created_at=time.time(),
                               params=stored, extras={"stage": "queued"}, client=client)
            self.store.add(record, image=image)
        self.dispatcher.wake.set()
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
        if record.status != "completed" or path is None:
            raise ApiError(404, f"video '{video_id}' is {record.status}, not completed: poll GET /v1/videos/"
                           f"{video_id} until its status is completed", param="video_id", code="video_not_ready")
        if not path.is_file():  # a delete or the retention sweep removed it (its row goes next)
            raise not_found(video_id)
        return path

    def delete(self, video_id: str) -> VideoDeleted:
        """Cancels the job if it is queued or running, then removes its row and files. A job
        running on another replica stops there at its next heartbeat (its row is gone). Of
        several deletes of one job at once, one removes it and the others get 404."""
        record = self._record(video_id)
        if record.status in UNFINISHED and self.dispatcher.holds(video_id):
            self.engine.cancel(video_id)
        if not self.sweeper.delete_job(video_id, request=True):
            raise not_found(video_id)
        return VideoDeleted(id=video_id)

    cancel = delete

    def recover(self) -> int:
        """Re-queues jobs whose owner's lease lapsed (a replica, or this server before a restart,
        died holding them); the dispatcher then runs them. Returns how many."""
        return self.dispatcher.recover()

    def sweep(self, now: float | None = None) -> list[str]:
        """Deletes the jobs (row and files) that finished more than `retention` seconds before
        `now` (default: the time), and stale temporary files; returns the deleted ids."""
        return self.sweeper.sweep(now)

    def remove_stale_files(self) -> int:
        """Removes temporary mp4 files no run is writing (a crash left them); returns how many."""
        return self.sweeper.remove_stale_files()

    def options(self) -> dict:
        """What a create request may ask for: the model, its defaults and the allowed values."""
        model = getattr(self._validate, "__self__", None)  # the adapter, when validate is its method
        return create_options(self.model_name, model, self.defaults, self.limits, self.loras)

    def healthy(self) -> bool:
        """Whether the engine can take work (not while the service stops)."""
        return not self.dispatcher.draining.is_set() and self.engine.accepting

    def unfit(self) -> str | None:
        """Why this replica should be replaced (None: it should not): its engine loop stopped
        without the service closing, or its rank group could not be rebuilt (EngineLoop.stalled; its
        jobs' leases are no longer renewed, so other replicas run them). Ray Serve's check_health.

        The only replica (replicas 1) whose group waits for Ray to place it again is not unfit for
        that (EngineLoop.awaits_placement): a new replica's group would wait for the same room, and
        while Serve replaced it no replica would run (/healthz down); it stays, degraded, and its
        rebuild works once Ray has placed the group."""
        if self.dispatcher.draining.is_set():
            return None  # stopping on purpose
        if not self.engine.accepting:
            return "the engine loop has stopped"
        if getattr(self.engine, "stalled", False):
            if self.replicas == 1 and getattr(self.engine, "awaits_placement", False):
                return None
            return f"the rank group cannot be rebuilt: {self.engine.health[1]}"
        return None

    def health(self) -> tuple[str, str | None]:
        """("ok" | "degraded" | "down", reason): degraded while the engine rebuilds its rank group
        (jobs are still taken and wait in the queue), and while the job store or the videos'
        disk has no room (creates get 507 storage_full; jobs keep their state until space returns)."""
        if not self.healthy():
            return "down", "the engine cannot take work"
        room = self.storage_problem()
        if room is not None:
            return "degraded", room
        return getattr(self.engine, "health", ("ok", None))

    def storage_problem(self) -> str | None:
        """Why jobs cannot be stored or written now (None: they can): the store's last write found
        no room (until a write succeeds), or the videos' disk is low (low_disk)."""
        if self.store.full is not None:
            return f"the job store's last write found no room ({self.store.full}); free space on its disk"
        return self.low_disk()

    def low_disk(self) -> str | None:
        """Why no video can be written now: the videos' folder has less than MIN_FREE_BYTES free."""
        try:
            free = shutil.disk_usage(self.videos_dir).free
        except OSError:
            return None
        if free < MIN_FREE_BYTES:
            return (f"the videos' disk has {free:,} bytes free ({self.videos_dir}), less than the "
                    f"{MIN_FREE_BYTES:,} a video may need; free space on it")
        return None

    def drain(self) -> None:
        """Takes no new job from now on (the server is stopping: ray_app/stopping.py): /healthz
        answers down and creates 503; running jobs go on until close()."""
        self.dispatcher.draining.set()

    def close(self, grace_s: float = 0.0) -> None:
        """Stops claiming; lets running jobs finish for up to `grace_s` seconds (serve.stop_grace_s
        when a replica stops); then stops listening and collecting, and hands the jobs it still
        holds back to the queue (another replica, or this one after a restart, runs them). The
        engine is the caller's to close afterwards."""
        self.dispatcher.close(grace_s)

    def shutdown(self, grace_s: float = 0.0) -> None:
        """close(grace_s), then the engine and the store (for owners of all three, e.g. open_service)."""
        self.close(grace_s)
        self.engine.close()
        self.store.close()

    # -- helpers --------------------------------------------------------------------------
    def _record(self, video_id: str) -> JobRecord:
        record = self.store.get(video_id)
        if record is None:
            raise not_found(video_id)
        return self._as_it_is(record)

    def _as_it_is(self, record: JobRecord) -> JobRecord:
        """The stored row, with the final state the store could not take yet (Dispatcher._final)."""
        unrecorded = self.dispatcher.unrecorded_state(record.id)
        return record if unrecorded is None else replace(record, **unrecorded)

    def view(self, record: JobRecord) -> Video:
        record = self._as_it_is(record)
        position = self.store.queue_position(record) if record.status == "queued" else None
        return to_video(record, self.model_name, position, retention=self.retention)

    def adapters_of(self, job_id: str) -> list[str]:
        """The names of the LoRA adapters the job chose (the metrics count requests by adapter)."""
        record = self.store.get(job_id)
        return [entry["name"] for entry in (record.params.get("loras") or [])] if record else []

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
