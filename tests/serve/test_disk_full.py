"""A full disk while an mp4 is written: imageio-ffmpeg ignores ffmpeg's exit status, so the file
it leaves may be empty or cut short. write_mp4 checks the file before the rename; the job fails
with `write_failed` and its message, nothing is left in the videos folder, /content stays 404."""

import contextlib
import errno

import pytest
import torch

import pipedit.video as video
from pipedit.serve.errors import ApiError
from pipedit.serve.schemas import VideoCreateParams
from pipedit.video import VideoWriteError, read_mp4, write_mp4
from job_engines import InstantEngine, service_on
from serve_helpers import wait_for


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
