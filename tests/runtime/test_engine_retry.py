"""Retries in the engine loop, on one in-process rank (no rank group to rebuild): a request that
fails is run again `retries` times, then ends failed with the cause; the others are untouched."""

import pytest

from pipedit.config import EngineConfig, ModelConfig, ReliabilityConfig
from pipedit.faults import ENV, ONCE_DIR_ENV
from pipedit.request import RequestFailure, RequestStatus, VideoRequest
from pipedit.runtime.engine_loop import EngineLoop


def _request(prompt):
    return VideoRequest(prompt, height=64, width=64, num_frames=5, steps=2)


@pytest.fixture
def core(demo_checkpoint, monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, "oom:phase=decode:prompt=ONCE:once,fail:phase=denoise:step=1:prompt=ALWAYS")
    monkeypatch.setenv(ONCE_DIR_ENV, str(tmp_path))  # the engine hands this folder to its rank
    events = []
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)), reliability=ReliabilityConfig(retries=1))
    with EngineLoop.from_config(config) as engine:
        engine.add_listener(events.append)
        yield engine, events


def test_a_request_failing_once_is_retried_and_one_failing_always_ends_failed(core):
    engine, events = core
    once, always, plain = _request("a fox ONCE"), _request("a fox ALWAYS"), _request("a plain fox")
    for request in (once, always, plain):
        engine.submit(request)
    retried = engine.wait(once.request_id, timeout=120)
    failed = engine.wait(always.request_id, timeout=120)
    assert not isinstance(retried, RequestFailure), retried.message
    assert not isinstance(engine.wait(plain.request_id, timeout=120), RequestFailure)
    assert isinstance(failed, RequestFailure) and failed.phase == "denoise"
    assert "injected fail fault on rank 0 (denoise, step 1" in failed.message
    assert "the last of 2 attempts" in failed.message
    statuses = [e.status for e in events if e.request_id == once.request_id]
    assert statuses.count(RequestStatus.ENCODING) == 2 and RequestStatus.FAILED not in statuses
    assert statuses[-1] is RequestStatus.DONE
    assert engine.health == ("ok", None)  # one in-process rank: nothing to rebuild

