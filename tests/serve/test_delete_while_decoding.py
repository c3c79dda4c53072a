"""Deleting a job while its video decodes: the engine loop keeps no outcome for it (a decoded
video is tens of MB) and the service keeps no trace of it, whichever comes first, the delete's
heartbeat or the decode's end."""

import threading

import torch

from pipedit.request import RequestEvent, RequestStatus, VideoRequest, VideoResult
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.serve.contract.schemas import VideoCreateParams
from job_engines import FakeEngine, service_on
from serve_helpers import wait_for


def _decodes_until(gate):
    def script(run, request):
        for status in (RequestStatus.ENCODING, RequestStatus.DENOISING, RequestStatus.DECODING):
            run.emit(RequestEvent(request.request_id, status, step=1, total_steps=1))
        gate.wait(30)  # decoding; the one-rank decode returns its video even if cancelled meanwhile
        run.emit(RequestEvent(request.request_id, RequestStatus.DONE))
        yield VideoResult(request.request_id, torch.zeros(5, 8, 8, 3), torch.zeros(1))

    return script


def test_deleting_a_decoding_job_leaks_nothing(tmp_path):
    gate = threading.Event()
    core = EngineLoop(FakeEngine(_decodes_until(gate)))
    service = service_on(core, tmp_path, lease_s=0.2)  # heartbeats every 0.05 s
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: service.get(job.id).pipedit.stage == "decoding", timeout=10)
        service.delete(job.id)
        wait_for(lambda: service.dispatcher.attempt(job.id) is None, timeout=10)  # the heartbeat saw it gone
        gate.set()
        wait_for(lambda: not service.dispatcher.claimed_at, timeout=10)
        assert core._outcomes == {} and core._kept_at == {} and core._running == set()
        assert list((tmp_path / "videos").iterdir()) == []
    finally:
        gate.set()
        service.close()
        core.close()


def test_discard_drops_an_outcome_now_or_when_it_arrives():
    gate = threading.Event()
    core = EngineLoop(FakeEngine(_decodes_until(gate)))
    try:
        early = core.submit(VideoRequest("a fox"))
        wait_for(lambda: early in core._running, timeout=10)
        core.discard(early)  # before its outcome exists
        gate.set()
        wait_for(lambda: early not in core._running, timeout=10)
        late = core.submit(VideoRequest("a boat"))
        wait_for(lambda: late in core._outcomes, timeout=10)
        core.discard(late)  # after
        assert core._outcomes == {} and core._discarded == set()
    finally:
        gate.set()
        core.close()
