"""LTX-2 served end to end: the tiny demo (video with sound) on a real engine loop, one job created
and downloaded through the official openai SDK; the mp4 it gets carries an AAC track as long as the
video (frames / fps, within one AAC frame: the sound's length follows the frames and fps, rounded
to the audio VAE's latent frames of 40 ms, and AAC codes whole frames of 1024 samples)."""

from pathlib import Path

import pytest

from openai_sdk import run_client
from pipedit.sound import probe_audio, read_sound
from pipedit.video import read_mp4
from serve_helpers import start

CLIENT = Path(__file__).with_name("sdk_one_video_client.py")
FRAMES, FPS = 9, 12
AAC_FRAME = 1024  # samples


@pytest.fixture(scope="module")
def ltx2(tmp_path_factory):
    from pipedit.integrations.ltx2.demo_checkpoint import write_demo_checkpoint

    checkpoint = write_demo_checkpoint(tmp_path_factory.mktemp("models") / "ltx2-demo")
    running = start(checkpoint, tmp_path_factory.mktemp("data"))
    try:
        yield running
    finally:
        running.close()


def test_the_openai_sdk_downloads_the_video_with_its_sound(ltx2, tmp_path):
    seen = run_client("openai-3", ltx2.url, tmp_path, client=CLIENT, args=("64x32", FRAMES, FPS))
    assert seen["video"]["status"] == "completed", seen["video"]
    path = Path(seen["files"][0])
    assert read_mp4(path).shape == (FRAMES, 32, 64, 3)
    stream = probe_audio(path)
    assert stream is not None and stream.codec == "aac"
    assert abs(read_sound(path).duration_s - FRAMES / FPS) <= AAC_FRAME / stream.sample_rate
