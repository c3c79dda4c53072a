"""A full disk while an mp4 is written: imageio-ffmpeg ignores ffmpeg's exit status, so the file
it leaves may be empty or cut short. write_mp4 checks the file before the rename; the job fails
with `write_failed` and its message, nothing is left in the videos folder, /content stays 404.

A full disk under the job store: a create answers 507 storage_full with Retry-After, /healthz is
degraded with the reason, and an accepted job's final state is kept until the store takes it."""

import contextlib
import errno
import json
import shutil
import sqlite3

import pytest
import torch
from sqlalchemy import event

import pipedit.video as video
from pipedit.serve.jobs import service as jobs
from pipedit.serve.http.app import build_app
from pipedit.serve.contract.errors import ApiError
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.video import VideoWriteError, read_mp4, write_mp4
from job_engines import GatedEngine, InstantEngine, service_on
from serve_helpers import call, serve_in_thread, wait_for


@pytest.fixture
def short_writes(monkeypatch, tmp_path):
    """Makes imageio's ffmpeg writer leave `keep` of the real file's bytes (0: an empty file), as
    ffmpeg does when the disk fills up; returns a setter for `keep`."""
    real = video.imageio.get_writer
    state = {"keep": 0.0}

    @contextlib.contextmanager
    def writer(path, **kwargs):
        frames = []
        yield type("W", (), {"append_data": lambda self, image: frames.append(image)})()
        scratch = tmp_path / "scratch.mp4"
        with real(scratch, **kwargs) as inner:
            for image in frames:
                inner.append_data(image)
        data = scratch.read_bytes()
        open(path, "wb").write(data[: int(len(data) * state["keep"])])

    monkeypatch.setattr(video.imageio, "get_writer", writer)
    return lambda keep: state.update(keep=keep)


@pytest.mark.parametrize("keep", [0.0, 0.5])
def test_write_mp4_refuses_a_short_file(tmp_path, short_writes, keep):
    short_writes(keep)
    target = tmp_path / "out" / "fox.mp4"
    with pytest.raises(VideoWriteError, match="writing the mp4 failed: the file ffmpeg wrote is incomplete"):
        write_mp4(torch.rand(9, 16, 16, 3), target)
    assert list(target.parent.iterdir()) == []  # neither the video nor its temporary file


def test_a_full_disk_is_named_as_such(tmp_path, short_writes, monkeypatch):
    short_writes(0.0)
    monkeypatch.setattr(video, "_disk_full", lambda folder: True)
    with pytest.raises(VideoWriteError) as caught:
        write_mp4(torch.rand(5, 16, 16, 3), tmp_path / "fox.mp4")
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value).startswith("writing the mp4 failed: No space left on device")


def test_write_mp4_still_writes_whole_videos(tmp_path):
    frames = torch.rand(9, 16, 24, 3)
    path = write_mp4(frames, tmp_path / "ok.mp4", fps=8)
    assert read_mp4(path).shape == (9, 16, 24, 3) and [p.name for p in tmp_path.iterdir()] == ["ok.mp4"]


def test_a_job_whose_mp4_is_cut_short_fails_with_write_failed(tmp_path, short_writes, monkeypatch):
    short_writes(0.0)
    monkeypatch.setattr(video, "_disk_full", lambda folder: True)
    engine = InstantEngine()
    service = service_on(engine, tmp_path)
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: service.get(job.id).status not in ("queued", "in_progress"), timeout=30)
        failed = service.get(job.id)
        assert failed.status == "failed" and failed.error.code == "write_failed"
        assert failed.error.message.startswith("writing the mp4 failed: No space left on device")
        assert service.store.get(job.id).attempt == 1 and engine.submitted == [job.id]  # not retried
        with pytest.raises(ApiError) as not_ready:
            service.content_path(job.id)
        assert not_ready.value.status == 404
        assert list((tmp_path / "videos").iterdir()) == []
    finally:
        service.close()


@pytest.fixture
def full_store():
    """Makes a store's writes fail as SQLite's do on a full disk ("database or disk is full")
    while `on`; returns (attach(store), the switch)."""
    switch = {"on": False}

    def refuse(conn, cursor, statement, params, context, executemany):
        if switch["on"] and statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError("database or disk is full")

    return (lambda store: event.listen(store._engine, "before_cursor_execute", refuse)), switch


def test_a_full_store_refuses_creates_with_507_and_keeps_an_accepted_jobs_state(tmp_path, short_writes, monkeypatch,
                                                                                full_store):
    short_writes(0.0)  # the disk is full for the mp4 too
    monkeypatch.setattr(video, "_disk_full", lambda folder: True)
    attach, disk = full_store
    engine = GatedEngine()
    service = service_on(engine, tmp_path)
    attach(service.store)
    url, stop = serve_in_thread(build_app(service))
    try:
        accepted = call("POST", f"{url}/v1/videos", {"prompt": "a fox"}).json()["id"]
        wait_for(lambda: engine.submitted == [accepted], timeout=30)
        assert call("GET", f"{url}/healthz").json() == {"status": "ok"}
        disk["on"] = True
        refused = call("POST", f"{url}/v1/videos", {"prompt": "a hare"})
        assert refused.status == 507 and refused.json()["error"]["code"] == "storage_full", refused.body
        assert refused.headers["retry-after"] == "60" and "database or disk is full" in refused.json()["error"]["message"]
        health = call("GET", f"{url}/healthz")
        assert health.status == 200 and health.json()["status"] == "degraded", health.body
        assert "no room" in health.json()["reason"] and "free space" in health.json()["reason"]
        engine.go.set()  # the run ends: its mp4 cannot be written, and neither can write_failed
        wait_for(lambda: service.dispatcher.unrecorded_state(accepted) is not None, timeout=30)
        shown = call("GET", f"{url}/v1/videos/{accepted}").json()
        assert shown["status"] == "failed" and shown["error"]["code"] == "write_failed", shown
        assert service.store.get(accepted).status in ("queued", "in_progress")
        disk["on"] = False  # space returns: the kept state is recorded, and the server is ok again
        wait_for(lambda: service.store.get(accepted).status == "failed", timeout=30)
        assert service.store.get(accepted).error["code"] == "write_failed"
        assert call("GET", f"{url}/healthz").json() == {"status": "ok"}
        assert call("POST", f"{url}/v1/videos", {"prompt": "a hare"}).status == 200
    finally:
        disk["on"] = False
        stop()
        service.close()


def test_a_nearly_full_videos_disk_refuses_creates_and_degrades_healthz(tmp_path, monkeypatch):
    service = service_on(InstantEngine(), tmp_path)
    url, stop = serve_in_thread(build_app(service))
    try:
        monkeypatch.setattr(jobs.shutil, "disk_usage", lambda folder: shutil._ntuple_diskusage(1 << 30, 1 << 30, 60_000))
        refused = call("POST", f"{url}/v1/videos", {"prompt": "a fox"})
        assert refused.status == 507 and refused.json()["error"]["code"] == "storage_full", refused.body
        assert refused.headers["retry-after"] == "60" and "60,000 bytes free" in refused.json()["error"]["message"]
        health = call("GET", f"{url}/healthz").json()
        assert health["status"] == "degraded" and "60,000 bytes free" in health["reason"], health
        assert service.store.count("queued") == 0
    finally:
        stop()
        service.close()


def test_a_delete_on_a_full_store_says_the_job_was_not_deleted(tmp_path, full_store):
    # The review: a DELETE on a full disk said "no room to store a job ... nothing was stored".
    from idle_app import asgi_request

    service = service_on(InstantEngine(), tmp_path)
    attach, disk = full_store
    attach(service.store)
    try:
        video_id = service.create(VideoCreateParams(prompt="a fox")).id
        wait_for(lambda: service.store.get(video_id).status == "completed", timeout=30)
        disk["on"] = True
        status, headers, body = asgi_request(build_app(service), "DELETE", f"/v1/videos/{video_id}")
        disk["on"] = False
        error = json.loads(body)["error"]
        assert (status, error["code"], headers["retry-after"]) == (507, "storage_full", "60"), body
        assert "cannot record the delete" in error["message"] and "the job was not deleted" in error["message"]
        assert "store a job" not in error["message"]
        assert service.store.get(video_id) is not None and service.content_path(video_id).exists()
    finally:
        disk["on"] = False
        service.close()
