"""The long-lived engine loop: requests arrive over time, are cancelled, and report progress.

One loop thread owns the rank groups (through the Engine's request pipeline): it admits the next queued
request as soon as the denoise group is free, so DeDiVAE overlap holds across requests submitted
at different times (request k decodes while request k+1, submitted later, denoises). Between
requests it polls for finished decodes. Events (queued, encoding, step i/n, decoding, done,
failed, cancelled) go to every listener, from the loop thread.

Cancellation: a queued request is dropped before it starts; a running one stops at the next step
boundary; a decode in flight is discarded when it returns. Either way the ranks go on with the
next request.

Failures of the rank group (a rank died, hung, ran out of memory): the requests in flight are
queued again at the front (up to `reliability.retries` times, then they fail with the cause),
the group is rebuilt while `health` says degraded, and the queue goes on. Once a rebuild has
failed (e.g. the node lost a GPU or its Ray node is gone), `stalled` is true until one succeeds:
the loop still takes requests, but cannot finish any, so whoever hands it work (the job service)
should hand that work to others. A request error
(`is_request_error`: the request itself is bad, e.g. its prompt cannot be encoded) fails that
request at once: it is not retried (and when only the prompt's encoding raised, the executor
reports the group intact: rank_failure.leaves_group_intact).

Outcomes kept for `wait` (no on_outcome) are dropped after OUTCOME_KEEP_S if nobody takes
them, and `discard` drops one at once (or when it arrives): a caller that loses interest in a
request (its job was deleted) never leaves a decoded video behind.

Invariant: only the loop thread calls the request pipeline and the executor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from ..config import EngineConfig
from ..request import RequestCancelled, RequestEvent, RequestFailure, RequestStatus, VideoRequest
from .engine import Engine
from .rank_failure import PlacementAwaitsNode, is_request_error
from .request_pipeline import EventCallback, Outcome

_log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.5  # nothing queued, nothing decoding: how long the loop sleeps between checks
POLL_WAIT_S = 0.02  # nothing queued, decodes in flight: how often it polls them
REBUILD_BACKOFF_S = (1.0, 30.0)  # wait before retrying a failed rebuild: first, longest
OUTCOME_KEEP_S = 600.0  # an outcome nobody waited for is dropped after this long


class EngineLoop:
    def __init__(self, engine: Engine, on_outcome: Callable[[Outcome], None] | None = None):
        """on_outcome: called (from the loop thread) with each VideoResult or RequestFailure;
        without it, outcomes are kept until `wait` takes them."""
        self.engine = engine
        self._on_outcome = on_outcome
        self._lock = threading.Condition()
        self._queue: deque[VideoRequest] = deque()
        self._running: set[str] = set()  # admitted, not finished
        self._cancelled: set[str] = set()
        self._outcomes: dict[str, Outcome] = {}
        self._kept_at: dict[str, float] = {}  # request id -> when its outcome was kept (monotonic)
        self._discarded: set[str] = set()  # requests whose outcome nobody will take
        self._listeners: list[EventCallback] = []
        self._stopping = False
        self._attempts: dict[str, int] = {}  # request id -> retries so far
        self._health = ("ok", None)
        self._stalled = False  # a rebuild failed; the next try may work
        self._rebuild_error: Exception | None = None  # the last failed rebuild's, until one works
        self._thread = threading.Thread(target=self._loop, name="pipedit-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, config: EngineConfig, on_outcome: Callable[[Outcome], None] | None = None) -> "EngineLoop":
        return cls(Engine(config), on_outcome)

    # -- the API --------------------------------------------------------------------------
    def submit(self, request: VideoRequest) -> str:
        with self._lock:
            if self._stopping:
                raise RuntimeError("the engine is shutting down")
            self._queue.append(request)
            self._lock.notify_all()
        self._emit(RequestEvent(request.request_id, RequestStatus.QUEUED))
        return request.request_id

    def cancel(self, request_id: str) -> bool:
        """True if the request was queued or running (it ends cancelled); False if unknown or done."""
        with self._lock:
            queued = next((r for r in self._queue if r.request_id == request_id), None)
            if queued is not None:
                self._queue.remove(queued)
            elif request_id in self._running:
                self._cancelled.add(request_id)
                return True
            else:
                return False
        self._finish(RequestFailure(request_id, "queued", RequestCancelled(request_id)))
        self._emit(RequestEvent(request_id, RequestStatus.CANCELLED))
        return True

    def add_listener(self, listener: EventCallback) -> Callable[[], None]:
        """Calls `listener` with every event from now on; returns the function that stops it."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._remove_listener(listener)

    def wait(self, request_id: str, timeout: float | None = None) -> Outcome:
        """The request's VideoResult or RequestFailure, once it has ended (TimeoutError before)."""
        with self._lock:
            if not self._lock.wait_for(lambda: request_id in self._outcomes, timeout):
                raise TimeoutError(f"request {request_id} has not ended within {timeout} s")
            self._kept_at.pop(request_id, None)
            return self._outcomes.pop(request_id)

    def discard(self, request_id: str) -> None:
        """Nobody will `wait` for this request: drop its outcome now, or when it arrives (a
        decoded video is tens of MB). Call it after `cancel` for a request you abandon."""
        with self._lock:
            self._kept_at.pop(request_id, None)
            if self._outcomes.pop(request_id, None) is None and (
                    request_id in self._running or any(r.request_id == request_id for r in self._queue)):
                self._discarded.add(request_id)

    @property
    def accepting(self) -> bool:
        """Whether submit takes work: the loop runs and close has not begun."""
        return self._thread.is_alive() and not self._stopping

    @property
    def health(self) -> tuple[str, str | None]:
        """("ok", None), or ("degraded", why) while the rank group is rebuilt after a failure."""
        return self._health

    @property
    def stalled(self) -> bool:
        """True from a failed rebuild of the rank group until a rebuild succeeds: requests are taken
        but none can finish meanwhile."""
        return self._stalled

    @property
    def awaits_placement(self) -> bool:
        """Stalled only until Ray places this replica's placement group again (a node it lost is
        replaced by one with room): the last rebuild was refused for that (PlacementAwaitsNode)."""
        return self._stalled and isinstance(self._rebuild_error, PlacementAwaitsNode)

    @property
    def queue_length(self) -> int:
        with self._lock:
            return len(self._queue)

    def close(self) -> None:
        """Queued requests end cancelled; the one running and decodes in flight finish first."""
        with self._lock:
            self._stopping = True
            dropped = list(self._queue)
            self._lock.notify_all()
        for request in dropped:
            self.cancel(request.request_id)
        self._thread.join()
        self.engine.close()

    def __enter__(self) -> "EngineLoop":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the loop thread ------------------------------------------------------------------
    def _loop(self) -> None:
        run = self.engine.pipeline.session(self._emit, self._is_cancelled, self._retry)
        while True:
            request = self._next(POLL_WAIT_S if run.in_flight else IDLE_WAIT_S)
            if request is None and self._stopping:
                break
            try:
                for outcome in run.submit(request) if request is not None else run.poll():
                    self._finish(outcome)
            except Exception:  # noqa: BLE001 - the loop must outlive any one request
                _log.exception("engine loop error")
            if run.broken is not None:
                self._recover(run)
        for outcome in run.drain():
            self._finish(outcome)

    def _recover(self, run) -> None:
        """Rebuilds the rank group, retrying with a growing pause until it works (or close)."""
        cause = str(run.broken)
        self._health = ("degraded", f"rebuilding the rank group after: {cause}")
        _log.warning("rank group failed (%s); rebuilding it", cause)
        pause, started = REBUILD_BACKOFF_S[0], time.monotonic()
        while True:
            try:
                for outcome in run.recover():
                    self._finish(outcome)
                break
            except Exception as error:  # noqa: BLE001 - keep the server up, say why in /healthz
                _log.exception("rank group rebuild failed")
                self._stalled, self._rebuild_error = True, error
                self._health = ("degraded", f"rank group rebuild failed ({error}); retrying in {pause:.0f} s")
                with self._lock:
                    if self._lock.wait_for(lambda: self._stopping, pause):
                        return
                pause = min(pause * 2, REBUILD_BACKOFF_S[1])
        _log.warning("rank group rebuilt in %.1f s", time.monotonic() - started)
        self._stalled, self._rebuild_error = False, None
        self._health = ("ok", None)

    def _retry(self, request: VideoRequest, error: BaseException) -> bool:
        """Queues a request that failed with the group again, at the front, if it has retries left.
        Never a cancelled request, nor one that failed with a request error (it would fail again)."""
        if isinstance(error, RequestCancelled) or is_request_error(error):
            return False
        with self._lock:
            done = self._attempts.get(request.request_id, 0)
            if self._stopping or request.request_id in self._cancelled \
                    or done >= self.engine.config.reliability.retries:
                return False
            self._attempts[request.request_id] = done + 1
            self._queue.appendleft(request)
            self._lock.notify_all()
        _log.warning("request %s failed (%s); retry %d", request.request_id, error, done + 1)
        return True

    def _next(self, timeout: float) -> VideoRequest | None:
        with self._lock:
            if not self._queue and not self._stopping:
                self._lock.wait(timeout)
            if not self._queue:
                return None
            request = self._queue.popleft()
            self._running.add(request.request_id)
            return request

    def _is_cancelled(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._cancelled

    def _finish(self, outcome: Outcome) -> None:
        with self._lock:
            retries = self._attempts.pop(outcome.request_id, 0)
            if retries and isinstance(outcome, RequestFailure) and not outcome.cancelled:
                wrapped = RuntimeError(f"{outcome.error} (the last of {retries + 1} attempts)")
                wrapped.__cause__, outcome.error = outcome.error, wrapped
            self._running.discard(outcome.request_id)
            self._cancelled.discard(outcome.request_id)
            if self._on_outcome is None:
                now = time.monotonic()
                for stale in [i for i, at in self._kept_at.items() if now - at > OUTCOME_KEEP_S]:
                    _log.warning("dropping the outcome of %s: nobody took it within %.0f s", stale, OUTCOME_KEEP_S)
                    self._outcomes.pop(stale, None)
                    self._kept_at.pop(stale, None)
                if outcome.request_id in self._discarded:
                    self._discarded.discard(outcome.request_id)
                else:
                    self._outcomes[outcome.request_id] = outcome
                    self._kept_at[outcome.request_id] = now
            self._lock.notify_all()
        if self._on_outcome is not None:
            try:
                self._on_outcome(outcome)
            except Exception:  # noqa: BLE001 - as for listeners
                _log.exception("outcome callback failed")

    def _emit(self, event: RequestEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a broken listener must not stop the engine
                _log.exception("event listener failed")

    def _remove_listener(self, listener: EventCallback) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
