"""Backpressure and cost caps: 429 with Retry-After above the server's and a key's queue limit,
400 above the per-request cost cap; the HTTP layer over an engine that runs nothing."""

import pytest

from pipedit.config import GenerationDefaults, ServeConfig
from pipedit.errors import UserInputError
from pipedit.serve.jobs.admission import DEFAULT_RETRY_AFTER_S, Admission
from pipedit.serve.http.app import build_app
from pipedit.serve.contract.errors import ApiError
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits, resolve
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import JobStore
from serve_helpers import SMALL, IdleEngine, call, serve_in_thread


@pytest.fixture
def serve_idle(tmp_path):
    opened = []

    def open_(limits, api_keys=()):
        service = JobService(IdleEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo",
                             GenerationDefaults(64, 64, 5, 2), limits)
        url, stop = serve_in_thread(build_app(service, api_keys))
        opened.append((service, stop))
        return url, service

    yield open_
    for service, stop in opened:
        stop()
        service.close()
        service.store.close()


def _post(url, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return call("POST", f"{url}/v1/videos", {"prompt": "a fox", **SMALL}, headers=headers)


def test_server_queue_limit_answers_429_with_retry_after(serve_idle):
    url, service = serve_idle(ServiceLimits(max_queued=3))
    assert [_post(url).status for _ in range(3)] == [200, 200, 200]
    full = _post(url)
    assert full.status == 429 and int(full.headers["retry-after"]) == DEFAULT_RETRY_AFTER_S
    error = full.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "queue_full")
    assert "3 videos are queued" in error["message"] and "retry in about" in error["message"]
    assert service.store.count("queued") == 3  # the refused one left no row


def test_each_api_key_has_its_own_queue_limit(serve_idle):
    url, service = serve_idle(ServiceLimits(max_queued=10, max_queued_per_key=2), api_keys=("k1", "k2"))
    assert [_post(url, "k1").status for _ in range(2)] == [200, 200]
    full = _post(url, "k1")
    assert full.status == 429 and "of this API key" in full.json()["error"]["message"]
    assert int(full.headers["retry-after"]) >= 1
    assert _post(url, "k2").status == 200
    rows, _ = service.store.list(limit=10)
    assert all(r.client and "k1" not in r.client for r in rows)  # a digest, never the key itself


def test_retry_after_follows_recent_job_durations_over_replicas(tmp_path):
    admission = Admission(JobStore.in_folder(tmp_path), ServiceLimits(), replicas=2)
    assert admission.retry_after() == DEFAULT_RETRY_AFTER_S / 2
    for seconds in (20.0, 40.0):
        admission.job_finished(seconds)
    assert admission.retry_after() == 15 and admission.retry_after(jobs_to_wait=4) == 60


def test_cost_cap_names_what_was_asked_and_what_is_allowed():
    limits = ServiceLimits(max_cost=64 * 64 * 5 * 2)
    params = dict(prompt="a fox", size="64x64", num_frames=5)
    resolve(VideoCreateParams(**params, num_inference_steps=2), "demo", GenerationDefaults(), limits)
    with pytest.raises(ApiError) as caught:
        resolve(VideoCreateParams(**params, num_inference_steps=3), "demo", GenerationDefaults(), limits)
    error = caught.value
    assert (error.status, error.code) == (400, "cost_too_high")
    assert "64x64 pixels x 5 frames x 3 steps = 61,440" in error.message and "at most 40,960" in error.message


@pytest.mark.parametrize("field, value", [("max_queued_per_key", 0), ("max_cost", -1), ("num_replicas", 0),
                                          ("job_lease_s", 0.5), ("database_url", "jobs.sqlite")])
def test_serve_config_refuses_bad_scale_settings(field, value):
    with pytest.raises(UserInputError, match=f"serve.{field}"):
        ServeConfig(**{field: value})
