"""A job runs at most serve.max_attempts times, then fails with the cause; a request error
fails at once and is never retried as a rank-group failure."""

import time

import pytest

from pipedit.errors import InvalidRequestError
from pipedit.request import VideoRequest
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.runtime.rank_failure import RankGroupError, is_request_error, leaves_group_intact
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import JobRecord
from job_engines import FakeEngine, InstantEngine, service_on
from serve_helpers import wait_for


def _final(service, job_id, timeout=30):
    wait_for(lambda: service.get(job_id).status not in ("queued", "in_progress"), timeout=timeout)
    return service.get(job_id)


def test_a_result_that_cannot_be_recorded_is_retried_then_fails_with_the_cause(tmp_path, monkeypatch):
    engine = InstantEngine()
    service = service_on(engine, tmp_path, max_attempts=3)

    def broken(*args):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(service.dispatcher, "_complete", broken)
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        failed = _final(service, job.id)
        assert failed.status == "failed" and failed.error.code == "attempts_exhausted"
        assert "ran 3 times" in failed.error.message and "the database went away" in failed.error.message
        assert engine.submitted == [job.id] * 3  # attempts 1, 2, 3; the 4th claim fails it
        assert service.store.get(job.id).attempt == 4
    finally:
        service.close()


def test_a_job_whose_replicas_keep_dying_fails_after_max_attempts(tmp_path):
    engine = InstantEngine()
    service = service_on(engine, tmp_path / "probe")  # only for its store's folder layout
    service.close()
    store = service.store
    store.add(JobRecord(id="video_" + "ab" * 16, status="queued", created_at=time.time(),
                        params=_params(), extras={"stage": "queued"}))
    for n in range(2):  # two replicas claimed it and died holding it
        assert store.claim(f"dead-{n}", lease_s=0.01).attempt == n + 1
        time.sleep(0.02)
        assert store.requeue_expired()
    again = service_on(engine, tmp_path / "probe", max_attempts=2)
    try:
        failed = _final(again, "video_" + "ab" * 16)
        assert failed.error.code == "attempts_exhausted" and "stopped renewing the lease" in failed.error.message
        assert engine.submitted == []  # never run a third time
    finally:
        again.close()


def test_a_request_the_engine_cannot_take_fails_at_once(tmp_path):
    engine = InstantEngine()
    service = service_on(engine, tmp_path)
    try:
        bad = dict(_params(), prompt="   ")  # passed the API once; VideoRequest refuses it
        service.store.add(JobRecord(id="video_" + "cd" * 16, status="queued", created_at=time.time(), params=bad,
                                    extras={"stage": "queued"}))
        service.dispatcher.wake.set()
        failed = _final(service, "video_" + "cd" * 16)
        assert failed.error.code == "invalid_request" and "prompt" in failed.error.message
        assert engine.submitted == [] and service.store.get(failed.id).attempt == 1
    finally:
        service.close()


def _params():
    return {"prompt": "a fox", "height": 8, "width": 8, "num_frames": 5, "num_inference_steps": 1,
            "guidance_scale": 6.0, "seed": 0, "fps": 8, "seconds": "1"}


def _encode_fails(cause):
    """A request pipeline script: the prompt's encoding raises `cause` on a rank, reported as the Ray
    executor reports it (a RankGroupError that rebuilds unless the group is intact)."""

    def script(run, request):
        try:
            raise RankGroupError(f"rank 0 (denoise) failed in encode_prompt: {type(cause).__name__}: {cause}", 0,
                                 rebuild=not leaves_group_intact("encode_prompt", cause)) from cause
        except RankGroupError as error:
            yield from run.failed(request, "encode", error)

    return script


def test_a_prompt_that_cannot_be_encoded_is_not_retried_and_the_group_stays():
    cause = UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
    engine = FakeEngine(_encode_fails(cause), retries=2)
    with EngineLoop(engine) as core:
        request_id = core.submit(VideoRequest("\ud800 fox"))
        outcome = core.wait(request_id, timeout=10)
        assert outcome.phase == "encode" and is_request_error(outcome.error)
        assert engine.run.submits == [request_id]  # once: not retried
        time.sleep(0.1)
        assert engine.run.rebuilds == 0 and core.health == ("ok", None)


def test_a_group_failure_is_still_retried_and_rebuilt():
    engine = FakeEngine(_encode_fails(RuntimeError("NCCL timeout")), retries=1)
    with EngineLoop(engine) as core:
        request_id = core.submit(VideoRequest("a fox"))
        outcome = core.wait(request_id, timeout=10)
        assert not is_request_error(outcome.error) and "the last of 2 attempts" in str(outcome.error)
        wait_for(lambda: engine.run.rebuilds == 2, timeout=10)  # the second failure is rebuilt after its outcome
        assert engine.run.submits == [request_id, request_id]


@pytest.mark.parametrize("error, expected", [
    (InvalidRequestError("steps"), True), (UnicodeEncodeError("utf-8", "x", 0, 1, "bad"), True),
    (RuntimeError("rank died"), False), (None, False)])
def test_is_request_error(error, expected):
    wrapped = RankGroupError("rank 0 failed")
    wrapped.__cause__ = error
    assert is_request_error(wrapped) is expected
