"""pipedit.video starts ffmpeg without a preexec_fn: a preexec_fn makes subprocess fork() and run
Python in the child, and in a process with gRPC threads (a Ray worker) gRPC's fork handlers crashed
that child before it became ffmpeg (the mp4 write failed with a broken pipe)."""

import subprocess

import numpy as np

from pipedit.video import write_mp4


def test_ffmpeg_starts_without_a_preexec_fn(tmp_path, monkeypatch):
    started = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        started.append(kwargs.get("preexec_fn"))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    frames = np.zeros((3, 16, 16, 3), dtype=np.float32)
    assert write_mp4(frames, tmp_path / "video.mp4", fps=8).stat().st_size > 0
    assert started and started == [None] * len(started)  # the writer's ffmpeg and the check's
