"""Server-sent events of GET /v1/videos/{id}/events: ONE watcher per replica reads the watched
jobs and fans every change out to all the open streams.

A stream used to read the store every 100 ms in a thread-pool thread of its own, so a few hundred
streams on one queued job filled the replica's max_ongoing_requests and starved /healthz. Now:

- The watcher (an asyncio task of the job service's own hub, JobService.events; the route's
  response: http/event_stream.py) reads each watched job once per tick (POLL_S), however many
  streams follow it, all in one worker-thread call. Engine events of the
  replica's own jobs (the service has written their row when the listener runs) wake it early,
  never sooner than MIN_GAP_S after the previous read. The store stays the truth across replicas:
  a job that another replica runs is seen at the next tick.
- A stream awaits its own asyncio queue: it holds no thread while it waits. The queue keeps only
  the newest state (a slow client skips states, never the final one).
- Open streams are capped per replica (serve.max_event_streams) and per API key
  (serve.max_event_streams_per_key): beyond, 429 too_many_streams with Retry-After (when the
  oldest stream in the way reaches its maximum lifetime, at most MAX_RETRY_AFTER_S).
- A stream ends after serve.event_stream_max_s with the comment `: reconnect ...`; clients open
  it again (EventSource does so by itself).

The caps count the streams of this replica (with N replicas a key may hold N times as many).
The watcher starts with the first stream and stops when the last one closes. Everything but the
store reads and the engine listener (one dict lookup, then a wake-up handed to the loop) runs on
the server's event loop, so the bookkeeping needs no lock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from pipedit.config import ServeConfig

from ..contract.errors import ApiError, not_found
from ..contract.schemas import FINAL_STATUSES, Video

_log = logging.getLogger(__name__)
_DEFAULTS = ServeConfig()
KEEPALIVE_S = 15.0  # a comment on a quiet stream this often: proxies drop silent connections
POLL_S = 0.15  # how often the watcher reads the watched jobs from the store
MIN_GAP_S = 0.1  # the soonest re-read after the previous one, when engine events wake the watcher
MAX_RETRY_AFTER_S = 30  # the most a refused stream is told to wait (Retry-After)

# What a subscriber's queue carries: (kind, text); kind "data" | "final" (a Video as JSON) or
# "error" (the 404 body: the job was deleted).
Item = tuple[str, str]


@dataclass(eq=False)
class Subscription:
    """One open stream: the job it follows, whose key opened it, and its queue (the newest item)."""

    video_id: str
    key: str | None
    opened: float  # time.monotonic()
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1))
    last: Item | None = None  # the last item offered: a stream sends a state once


class EventHub:
    """The watcher and the stream caps of one job service (one replica).

    `read(video_id)` returns the job's Video, or None once it is deleted; it runs in a worker
    thread. `add_listener(callback)` (optional; the engine's) calls back with every engine event
    (`.request_id`) and returns a function that stops it: an event of a watched job wakes the
    watcher early. Use it from one event loop (the server's)."""

    def __init__(self, read: Callable[[str], Video | None], *,
                 max_streams: int = _DEFAULTS.max_event_streams,
                 max_streams_per_key: int = _DEFAULTS.max_event_streams_per_key,
                 max_s: float = _DEFAULTS.event_stream_max_s, poll_s: float = POLL_S,
                 min_gap_s: float = MIN_GAP_S, keepalive_s: float = KEEPALIVE_S,
                 add_listener: Callable[[Callable], Callable[[], None]] | None = None):
        self.read, self.add_listener = read, add_listener
        self.max_streams, self.max_streams_per_key, self.max_s = max_streams, max_streams_per_key, max_s
        self.poll_s, self.min_gap_s, self.keepalive_s = poll_s, min_gap_s, keepalive_s
        self.reads = 0  # job reads so far (one per watched job per tick, whatever the streams)
        self._open: set[Subscription] = set()
        self._per_key: dict[str, set[Subscription]] = {}
        self._watched: dict[str, set[Subscription]] = {}  # video id -> its streams
        self._latest: dict[str, Item] = {}  # video id -> the newest item read (for new streams)
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._last_read = 0.0

    @classmethod
    def for_service(cls, service, config: ServeConfig | None = None, **options) -> "EventHub":
        """A hub over `service` (a JobService). Limits: `options` (the constructor's keywords),
        else `config` (a ServeConfig), else service.limits where it carries them (same names as
        ServeConfig's), else ServeConfig's defaults."""
        def limit(name: str):
            return getattr(config, name) if config is not None else \
                getattr(getattr(service, "limits", None), name, getattr(_DEFAULTS, name))

        engine = getattr(service, "engine", None)
        options = {"max_streams": limit("max_event_streams"), "max_streams_per_key": limit("max_event_streams_per_key"),
                   "max_s": limit("event_stream_max_s"), "add_listener": getattr(engine, "add_listener", None),
                   **options}
        return cls(service_reader(service), **options)

    # -- streams (on the event loop) --------------------------------------------------------
    @property
    def open_streams(self) -> int:
        return len(self._open)

    @property
    def watching(self) -> bool:
        """Whether the watcher runs."""
        return self._task is not None and not self._task.done()

    def subscribe(self, video_id: str, key: str | None = None) -> Subscription:
        """Opens a stream on `video_id` for `key`; 429 too_many_streams when a cap is reached."""
        now = time.monotonic()
        mine = self._per_key.get(key, set()) if key is not None else set()
        if key is not None and len(mine) >= self.max_streams_per_key:
            raise self._refusal(mine, now, f"this API key has {len(mine)} open",
                                "serve.max_event_streams_per_key", self.max_streams_per_key)
        if len(self._open) >= self.max_streams:
            raise self._refusal(self._open, now, f"this server has {len(self._open)} open",
                                "serve.max_event_streams", self.max_streams)
        sub = Subscription(video_id, key, now)
        self._open.add(sub)
        if key is not None:
            self._per_key.setdefault(key, set()).add(sub)
        self._watched.setdefault(video_id, set()).add(sub)
        if video_id in self._latest:
            _offer(sub, self._latest[video_id])
        else:  # a job not watched yet: read it now rather than at the next tick
            self._poke()
        self._start()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Closes a stream (again: nothing)."""
        if sub not in self._open:
            return
        self._open.discard(sub)
        if sub.key is not None:
            mine = self._per_key.get(sub.key, set())
            mine.discard(sub)
            if not mine:
                self._per_key.pop(sub.key, None)
        followers = self._watched.get(sub.video_id, set())
        followers.discard(sub)
        if not followers:
            self._watched.pop(sub.video_id, None)
            self._latest.pop(sub.video_id, None)
        if not self._open:
            self._poke()  # the watcher sees no stream and stops

    async def events(self, sub: Subscription) -> AsyncIterator[str]:
        """The stream's text: `data: <Video JSON>` on every change until a final status,
        `event: error` when the job is deleted, `: keep-alive` comments while quiet, and a
        `: reconnect` comment when the stream has lived max_s. Unsubscribes at its end."""
        deadline = sub.opened + self.max_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    yield (f": reconnect: this stream reached its maximum lifetime of {self.max_s:g} s "
                           f"(serve.event_stream_max_s); open it again to keep following the job\n\n")
                    return
                try:
                    async with asyncio.timeout(min(self.keepalive_s, left)):
                        kind, text = await sub.queue.get()
                except TimeoutError:
                    if time.monotonic() < deadline:
                        yield ": keep-alive\n\n"
                    continue
                if kind == "error":
                    yield f"event: error\ndata: {text}\n\n"
                    return
                yield f"data: {text}\n\n"
                if kind == "final":
                    return
        finally:
            self.unsubscribe(sub)

    def _refusal(self, streams, now: float, have: str, setting: str, limit: int) -> ApiError:
        # A slot frees at the latest when the oldest stream in the way reaches its lifetime; often
        # much sooner (a job finishes), hence the cap.
        oldest = min((s.opened for s in streams), default=now)
        retry = min(max(1, math.ceil(oldest + self.max_s - now)), MAX_RETRY_AFTER_S)
        return ApiError(429, f"too many event streams: {have} (the limit is {limit}, {setting}); close one, "
                        f"retry after {retry} s, or poll GET /v1/videos/{{video_id}} instead", type="rate_limit_error",
                        code="too_many_streams", headers={"Retry-After": str(retry)})

    # -- the watcher ------------------------------------------------------------------------
    def _start(self) -> None:
        if self.watching:
            return
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._watch(loop), name="pipedit-event-watcher")

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        wake = self._wake
        remove = None
        if self.add_listener is not None:
            def on_event(event) -> None:  # on the engine's thread: keep it short
                if getattr(event, "request_id", None) in self._watched:
                    try:
                        loop.call_soon_threadsafe(wake.set)
                    except RuntimeError:  # the loop has closed
                        pass
            remove = self.add_listener(on_event)
        try:
            while self._watched:
                ids = list(self._watched)
                self._last_read = time.monotonic()
                # One worker thread reads every watched job; the loop's default executor, so the
                # routes' thread pool never delays the streams nor the other way round.
                items = await loop.run_in_executor(None, self._read_all, ids)
                self._publish(items)
                if not self._watched:
                    break
                try:
                    async with asyncio.timeout(self.poll_s):
                        await wake.wait()
                except TimeoutError:
                    pass
                wake.clear()
                gap = self._last_read + self.min_gap_s - time.monotonic()
                if gap > 0 and self._watched:
                    await asyncio.sleep(gap)
        except Exception:  # noqa: BLE001 - never leave streams waiting on a dead watcher
            _log.exception("the event watcher failed; the open streams end")
            for sub in list(self._open):
                _offer(sub, ("error", json.dumps(ApiError(
                    500, "the event stream failed; reconnect", type="server_error", code="internal_error").body())))
        finally:
            if remove is not None:
                remove()
            if self._task is asyncio.current_task():
                self._task = None

    def _read_all(self, ids: list[str]) -> dict[str, Item]:
        """In a worker thread: the newest item of each job (one read each)."""
        items = {}
        for video_id in ids:
            try:
                video = self.read(video_id)
            except Exception:  # noqa: BLE001 - e.g. the database restarting: the next tick tries again
                _log.warning("event watcher: reading %s failed; retrying", video_id, exc_info=True)
                continue
            self.reads += 1
            if video is None:
                items[video_id] = ("error", json.dumps(not_found(video_id).body()))
            else:
                items[video_id] = ("final" if video.status in FINAL_STATUSES else "data", video.model_dump_json())
        return items

    def _publish(self, items: dict[str, Item]) -> None:
        for video_id, item in items.items():
            followers = self._watched.get(video_id)
            if not followers:
                continue  # its last stream closed while it was read
            self._latest[video_id] = item
            for sub in followers:
                _offer(sub, item)


def _offer(sub: Subscription, item: Item) -> None:
    """Queues `item` for the stream unless it sent it already; the queue keeps the newest only."""
    if sub.last == item:
        return
    sub.last = item
    if sub.queue.full():
        sub.queue.get_nowait()
    sub.queue.put_nowait(item)


def service_reader(service) -> Callable[[str], Video | None]:
    """The job's Video as GET /v1/videos/{id} shows it, or None once deleted. The route has
    checked that the caller may see the job (its 404) before the stream opens, so the watcher
    reads for every caller (JobService.view: no caller check)."""

    def read(video_id: str) -> Video | None:
        record = service.store.get(video_id)
        return None if record is None else service.view(record)

    return read
