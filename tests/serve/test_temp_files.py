"""Temporary mp4 files carry the job's prefix (`.{id}.attempt{N}.mp4`), so DELETE's `.{id}.*`
removes them; stale ones (a crash mid-write) are removed at startup, never a finished video nor
the file of an attempt that may still be writing."""

import time
from pathlib import Path

import pipedit.video as video
from pipedit.video import read_mp4
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import JobRecord, JobStore
from job_engines import InstantEngine, service_on
from serve_helpers import wait_for

PARAMS = {"prompt": "a fox", "height": 8, "width": 8, "num_frames": 5, "num_inference_steps": 1,
          "guidance_scale": 6.0, "seed": 0, "fps": 8, "seconds": "1"}


def _id(c):
    return "video_" + c * 32


def test_the_temporary_file_has_the_jobs_prefix_so_delete_removes_it(tmp_path, monkeypatch):
    real, written = video.imageio.get_writer, []

    def recording_writer(path, **kwargs):
        written.append(Path(path).name)
        return real(path, **kwargs)

    monkeypatch.setattr(video.imageio, "get_writer", recording_writer)
    service = service_on(InstantEngine(), tmp_path)
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: service.get(job.id).status == "completed", timeout=30)
        assert written == [f".{job.id}.attempt1.mp4"]
        videos = tmp_path / "videos"
        (videos / written[0]).write_bytes(b"\0" * 100)  # as a process killed mid-write leaves it
        service.delete(job.id)
        assert list(videos.iterdir()) == []
    finally:
        service.close()


def test_stale_temporary_files_are_removed_at_startup(tmp_path):
    store = JobStore.in_folder(tmp_path)
    now = time.time()
    store.add(JobRecord(id=_id("a"), status="completed", created_at=now, params=PARAMS, video_file=f"{_id('a')}.mp4"))
    store.add(JobRecord(id=_id("b"), status="in_progress", created_at=now, params=PARAMS, owner="other", attempt=2,
                        lease_until=now + 60))
    store.close()
    videos = tmp_path / "videos"
    videos.mkdir()
    keep = [f"{_id('a')}.mp4",  # a finished video
            f".{_id('b')}.attempt2.mp4",  # another replica is writing it right now
            ".notes", "README"]  # not ours
    stale = [f".{_id('a')}.attempt1.mp4",  # its job finished
             f"..{_id('a')}.attempt1.mp4.partial.mp4",  # an older version's name
             f".{_id('b')}.attempt1.mp4",  # an earlier attempt
             f".{_id('c')}.attempt1.mp4"]  # its job is gone
    for name in keep + stale:
        (videos / name).write_bytes(b"x")
    service = service_on(InstantEngine(), tmp_path)
    try:
        assert sorted(p.name for p in videos.iterdir()) == sorted(keep)
    finally:
        service.close()


def test_a_completion_removes_what_earlier_attempts_left_at_once(tmp_path):
    """An earlier attempt's replica died writing the video (tests/serve/test_ray_replicas.py, on a
    busy machine): the attempt that completes the job removes that file, not the next sweep."""
    store = JobStore.in_folder(tmp_path)
    store.add(JobRecord(id=_id("d"), status="queued", created_at=time.time(), params=PARAMS, attempt=1))
    store.close()
    videos = tmp_path / "videos"
    videos.mkdir()
    for name in (f".{_id('d')}.attempt1.mp4", f".{_id('d')}.attempt1.mp4.wav"):  # left by attempt 1
        (videos / name).write_bytes(b"x")
    service = service_on(InstantEngine(), tmp_path)  # its start keeps them: attempt 1 is the job's latest
    try:
        service.sweeper.remove_stale_files = lambda: 0  # only the completion may remove them
        wait_for(lambda: service.get(_id("d")).status == "completed", timeout=30)
        assert service.store.get(_id("d")).attempt == 2
        assert [p.name for p in videos.iterdir()] == [f"{_id('d')}.mp4"]
    finally:
        service.close()


def test_a_completed_job_leaves_only_its_video(tmp_path):
    service = service_on(InstantEngine(), tmp_path)
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: service.get(job.id).status == "completed", timeout=30)
        assert read_mp4(service.content_path(job.id)).shape == (5, 8, 8, 3)  # written whole
        assert [p.name for p in (tmp_path / "videos").iterdir()] == [f"{job.id}.mp4"]
        service.delete(job.id)
        assert list((tmp_path / "videos").iterdir()) == []
    finally:
        service.close()
