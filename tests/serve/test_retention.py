"""serve.retention: a finished job (completed, failed or cancelled) and its video are deleted
`retention` seconds after it finished; unfinished jobs never; 0 keeps everything."""

import time

import pytest

from pipedit.serve.contract.errors import ApiError
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import JobRecord
from job_engines import InstantEngine, service_on
from serve_helpers import wait_for

PARAMS = {"prompt": "a fox", "height": 8, "width": 8, "num_frames": 5, "num_inference_steps": 1,
          "guidance_scale": 6.0, "seed": 0, "fps": 8, "seconds": "1"}


def _completed(service):
    job = service.create(VideoCreateParams(prompt="a fox"))
    wait_for(lambda: service.get(job.id).status == "completed", timeout=30)
    return job.id


def test_sweep_deletes_jobs_finished_longer_ago_than_retention(tmp_path):
    service = service_on(InstantEngine(), tmp_path, retention=3600)
    try:
        done = _completed(service)
        finished = service.store.get(done).extras["finished_at"]
        now = time.time()
        # A failed job created long ago but finished just now: its finish time counts.
        service.store.add(JobRecord(id="video_" + "f" * 32, status="failed", created_at=now - 7200, params=PARAMS,
                                    error={"code": "x", "message": "y"}, extras={"finished_at": now + 100}))
        service.store.add(JobRecord(id="video_" + "e" * 32, status="cancelled", created_at=now - 7200,
                                    params=PARAMS))  # an older version's row: no finish time, created counts
        service.store.add(JobRecord(id="video_" + "d" * 32, status="queued", created_at=now - 7200, params=PARAMS,
                                    owner="someone-else", lease_until=now + 3600))  # unfinished: never swept
        assert service.sweep(now=finished + 3599) == ["video_" + "e" * 32]
        assert service.content_path(done).is_file()
        assert sorted(service.sweep(now=finished + 3601)) == sorted([done])
        with pytest.raises(ApiError):
            service.get(done)
        assert list((tmp_path / "videos").iterdir()) == []
        assert service.sweep(now=now + 100 + 3601) == ["video_" + "f" * 32]
        assert service.store.get("video_" + "d" * 32) is not None
    finally:
        service.close()


def test_the_service_sweeps_on_its_own(tmp_path):
    service = service_on(InstantEngine(), tmp_path, retention=0.4)  # sweeps every 0.2 s
    try:
        done = _completed(service)
        # The sweep deletes the row, then the files: both must go (the row alone can win a race with
        # this check; wait_for fails the test when either stays for 10 s).
        videos = tmp_path / "videos"
        wait_for(lambda: service.store.get(done) is None and not any(videos.iterdir()), timeout=10)
    finally:
        service.close()


def test_zero_retention_keeps_everything(tmp_path):
    service = service_on(InstantEngine(), tmp_path, retention=0)
    try:
        done = _completed(service)
        assert service.sweep(now=time.time() + 10 * 365 * 86400) == []
        assert service.content_path(done).is_file()
    finally:
        service.close()
