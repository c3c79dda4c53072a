"""A served job of a model that makes sound: the content download (/v1/videos/{id}/content, what
the page plays and the openai SDK's download_content fetches) is the stored mp4 with its AAC
track, on an engine loop whose results carry a sound track (no model runs)."""

import math
from pathlib import Path

import torch

from job_engines import InstantEngine, service_on
from openai_sdk import run_client
from pipedit.request import VideoResult
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.http.app import build_app
from pipedit.sound import Soundtrack, probe_audio, read_sound
from serve_helpers import call, serve_in_thread, wait_for

RATE, SECONDS = 24000, 0.625  # the video's 5 frames at 8 fps


class SoundingEngine(InstantEngine):
    """InstantEngine whose videos come with a stereo tone of the video's length."""

    def wait(self, request_id, timeout=None):
        plain = super().wait(request_id, timeout)
        t = torch.arange(int(RATE * SECONDS)) / RATE
        sound = Soundtrack(0.3 * torch.stack([torch.sin(2 * math.pi * 330 * t), torch.sin(2 * math.pi * 660 * t)]),
                           RATE)
        return VideoResult(plain.request_id, plain.frames, plain.latents, sound=sound)


def _has_the_track(path: Path) -> None:
    stream = probe_audio(path)
    assert (stream.codec, stream.sample_rate, stream.channels) == ("aac", RATE, 2)
    assert abs(read_sound(path).duration_s - SECONDS) < 1024 / RATE  # within one AAC frame


def test_the_content_download_and_the_sdk_carry_the_sound(tmp_path):
    service = service_on(SoundingEngine(), tmp_path / "data")
    url, stop = serve_in_thread(build_app(service))
    try:
        job = service.create(VideoCreateParams(prompt="a fox", fps=8))
        wait_for(lambda: service.get(job.id).status == "completed", timeout=60)
        _has_the_track(service.content_path(job.id))  # what the store keeps
        reply = call("GET", f"{url}/v1/videos/{job.id}/content")
        assert reply.status == 200
        (tmp_path / "download.mp4").write_bytes(reply.body)
        _has_the_track(tmp_path / "download.mp4")
        files = run_client("openai-3", url, tmp_path, client=Path(__file__).with_name("sdk_sound_client.py"),
                           args=(job.id,))["files"]
        assert Path(files[0]).read_bytes() == reply.body
    finally:
        stop()
        service.close()
        service.store.close()
