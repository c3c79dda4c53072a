"""Fakes for the job-service tests of disk-full writes, attempts, retention and deletion: an
engine loop that makes a tiny video at once (`InstantEngine`), and a fake `Engine` to run the
real EngineLoop on (`FakeEngine`: its request pipeline run is scripted, no model is loaded)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch

from pipedit.config import GenerationDefaults
from pipedit.request import RequestEvent, RequestFailure, RequestStatus, VideoResult
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobStore

TINY = GenerationDefaults(height=8, width=8, num_frames=5, steps=1)


class InstantEngine:
    """The engine loop's interface: every request ends at once with a grey 5x8x8 video."""

    accepting = True
    queue_length = 0

    def __init__(self):
        self.listeners, self.outcomes, self.submitted = [], {}, []
        self.cond = threading.Condition()

    def add_listener(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def submit(self, request):
        self.submitted.append(request.request_id)
        with self.cond:
            self.outcomes[request.request_id] = VideoResult(request.request_id, torch.full((5, 8, 8, 3), 0.5),
                                                            torch.zeros(1))
            self.cond.notify_all()
        for status in (RequestStatus.QUEUED, RequestStatus.DENOISING, RequestStatus.DONE):
            for listener in list(self.listeners):
                listener(RequestEvent(request.request_id, status, step=1, total_steps=1))
        return request.request_id

    def cancel(self, request_id):
        return False

    def wait(self, request_id, timeout=None):
        with self.cond:
            if not self.cond.wait_for(lambda: request_id in self.outcomes, timeout):
                raise TimeoutError(request_id)
            return self.outcomes.pop(request_id)

    def close(self):
        self.accepting = False


class GatedEngine(InstantEngine):
    """InstantEngine whose outcomes are handed out only once `go` is set."""

    def __init__(self):
        super().__init__()
        self.go = threading.Event()

    def wait(self, request_id, timeout=None):
        self.go.wait(timeout)
        return super().wait(request_id, timeout)


def service_on(engine, folder, **kwargs) -> JobService:
    store = JobStore.in_folder(folder)
    return JobService(engine, store, folder, "demo", TINY, ServiceLimits(), **kwargs)


class FakeRun:
    """A request pipeline run: `script(run, request)` yields the request's outcomes (it may emit
    events, set `broken`, ask `retry`); counts submits and rebuilds."""

    def __init__(self, emit, is_cancelled, retry, script):
        self.emit, self.is_cancelled, self.retry, self.script = emit, is_cancelled, retry, script
        self.in_flight, self.broken, self.submits, self.rebuilds = {}, None, [], 0

    def submit(self, request):
        self.submits.append(request.request_id)
        yield from self.script(self, request)

    def failed(self, request, phase, error):
        """What the request pipeline's _failed does."""
        if getattr(error, "rebuild", False) and self.broken is None:
            self.broken = error
        if self.retry(request, error):
            self.emit(RequestEvent(request.request_id, RequestStatus.QUEUED))
            return []
        self.emit(RequestEvent(request.request_id, RequestStatus.FAILED))
        return [RequestFailure(request.request_id, phase, error)]

    def poll(self):
        return []

    def drain(self):
        return []

    def recover(self):
        self.rebuilds += 1
        self.broken = None
        return []


class FakeEngine:
    """What EngineLoop needs of an Engine; `run` is the FakeRun once the core has started."""

    def __init__(self, script, retries=1):
        self.script, self.run = script, None
        self.config = SimpleNamespace(reliability=SimpleNamespace(retries=retries))
        self.started = threading.Event()
        self.pipeline = SimpleNamespace(session=self._session)

    def _session(self, emit, is_cancelled, retry):
        self.run = FakeRun(emit, is_cancelled, retry, self.script)
        self.started.set()
        return self.run

    def close(self):
        pass
