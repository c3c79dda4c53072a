"""The long-lived engine loop: requests over time, events, cancellation, DeDiVAE overlap."""

import threading
import time

import pytest

from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import RequestFailure, RequestStatus, VideoRequest
from pipedit.runtime.engine_loop import EngineLoop


class Recorder:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def __call__(self, event):
        with self.lock:
            self.events.append(event)

    def of(self, request_id):
        with self.lock:
            return [e for e in self.events if e.request_id == request_id]

    def first(self, request_id, status):
        return next(e for e in self.of(request_id) if e.status is status)


def _request(prompt, steps=2, **shape):
    size = dict(height=64, width=64, num_frames=5) | shape
    return VideoRequest(prompt, steps=steps, **size)


def _core(path, **parallel):
    return EngineLoop.from_config(EngineConfig(model=ModelConfig(path=str(path)), parallel=ParallelConfig(**parallel)))


def _wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_requests_complete_with_ordered_events(demo_checkpoint):
    recorder = Recorder()
    with _core(demo_checkpoint) as core:
        core.add_listener(recorder)
        ids = [core.submit(_request(p, num_frames=n)) for p, n in (("a fox", 5), ("a boat", 9), ("rain", 1))]
        outcomes = [core.wait(i, timeout=120) for i in ids]
    assert [tuple(o.frames.shape) for o in outcomes] == [(5, 64, 64, 3), (9, 64, 64, 3), (1, 64, 64, 3)]
    for request_id in ids:
        events = recorder.of(request_id)
        statuses = [e.status for e in events]
        assert statuses[0] is RequestStatus.QUEUED and statuses[-1] is RequestStatus.DONE
        assert statuses.index(RequestStatus.ENCODING) < statuses.index(RequestStatus.DENOISING)
        steps = [e.step for e in events if e.status is RequestStatus.DENOISING]
        assert steps == [0, 1, 2] and all(e.total_steps == 2 for e in events if e.status is RequestStatus.DENOISING)


def test_cancel_queued_and_running_then_the_next_request_runs(demo_checkpoint):
    recorder = Recorder()
    with _core(demo_checkpoint) as core:
        core.add_listener(recorder)
        running = core.submit(_request("a long render", steps=40))
        queued = core.submit(_request("never starts"))
        after = core.submit(_request("runs after the cancel"))
        assert core.cancel(queued)
        _wait_for(lambda: any(e.status is RequestStatus.DENOISING and e.step >= 2 for e in recorder.of(running)))
        assert core.cancel(running)
        cancelled_at = max(e.step for e in recorder.of(running) if e.status is RequestStatus.DENOISING)
        stopped, dropped, finished = (core.wait(i, timeout=120) for i in (running, queued, after))
        assert not core.cancel(after)  # already done: nothing to cancel
    assert isinstance(stopped, RequestFailure) and stopped.cancelled and stopped.phase == "denoise"
    last_step = max(e.step for e in recorder.of(running) if e.status is RequestStatus.DENOISING)
    assert last_step <= cancelled_at + 1 < 40  # stopped within one step of the cancel
    assert isinstance(dropped, RequestFailure) and dropped.cancelled and dropped.phase == "queued"
    assert [e.status for e in recorder.of(queued)] == [RequestStatus.QUEUED, RequestStatus.CANCELLED]
    assert not isinstance(finished, RequestFailure) and finished.frames.shape[0] == 5
    assert recorder.of(running)[-1].status is RequestStatus.CANCELLED


@pytest.mark.slow
def test_a_later_request_denoises_while_the_earlier_one_decodes(ray_session, demo_checkpoint):
    recorder = Recorder()
    big = dict(height=256, width=256, num_frames=17)  # decode (~seconds) outlasts 2 denoising steps
    with _core(demo_checkpoint, decode_ranks=1, aco="off") as core:
        core.add_listener(recorder)
        first = core.submit(_request("a red fox in snow", **big))
        _wait_for(lambda: any(e.status is RequestStatus.DECODING for e in recorder.of(first)), timeout=120)
        second = core.submit(_request("a lighthouse at dusk", **big))  # submitted later, on its own
        outcomes = [core.wait(i, timeout=180) for i in (first, second)]
    assert all(not isinstance(o, RequestFailure) for o in outcomes)
    first_done = recorder.first(first, RequestStatus.DONE).at
    second_denoised = [e.at for e in recorder.of(second) if e.status is RequestStatus.DENOISING and e.step > 0]
    assert second_denoised and second_denoised[0] < first_done  # overlap: k+1 denoised during k's decode
