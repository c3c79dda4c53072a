"""HunyuanVideo 1.5 image-to-video served end to end: the tiny i2v demo checkpoint
(HunyuanVideo15ImageToVideoPipeline) on a real engine loop, driven by the official openai SDK with
`input_reference` as a multipart file and as a data URL object (sdk_i2v_client.py). The jobs
complete with the frames and size asked for; that the engine's latents equal diffusers' pipeline
is tests/integrations/hunyuan_video_15."""

from pathlib import Path

import numpy as np
import pytest

from image_inputs import image_bytes
from openai_sdk import run_client
from pipedit.adapter import shape_validator
from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.jobs.store import JobStore
from pipedit.video import read_mp4
from serve_helpers import Running, call, serve_in_thread


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from pipedit.cli import main

    checkpoint = tmp_path_factory.mktemp("models") / "hv15-i2v"
    assert main(["demo-checkpoint", "--model", "hunyuan-video-1.5", "--preset", "i2v", str(checkpoint)]) == 0
    folder = tmp_path_factory.mktemp("jobs")
    engine = EngineLoop.from_config(EngineConfig(model=ModelConfig(path=str(checkpoint))))
    service = JobService(engine, JobStore.in_folder(folder), folder, "hv15-i2v", GenerationDefaults(48, 64, 5, 2),
                         validate=shape_validator(str(checkpoint)))
    url, stop = serve_in_thread(build_app(service))
    running = Running(engine, service, url, stop)
    try:
        yield running
    finally:
        running.close()


def test_options_offer_the_image_and_the_16x_vaes_sizes(served):
    options = call("GET", f"{served.url}/v1/pipedit/options").json()
    assert (options["takes_image"], options["needs_image"], options["takes_negative_prompt"]) == (True, True, True)
    assert options["size_multiple"] == 16 and options["frame_counts"][:3] == [1, 5, 9]
    reply = call("POST", f"{served.url}/v1/videos", {"prompt": "a fox"})
    assert reply.status == 400 and reply.json()["error"]["code"] == "missing_required_parameter"


@pytest.mark.slow
def test_the_openai_sdk_makes_a_video_from_an_image(served, tmp_path):
    first, second = image_bytes("png", (61, 37), (220, 30, 30)), image_bytes("webp", (50, 50), (20, 60, 230))
    (tmp_path / "a.png").write_bytes(first)
    (tmp_path / "b.webp").write_bytes(second)
    seen = run_client("openai-3", served.url, tmp_path, client=Path(__file__).with_name("sdk_i2v_client.py"),
                      args=(tmp_path / "a.png", tmp_path / "b.webp"))
    for video, path in zip(seen["videos"], seen["files"]):
        assert (video["status"], video["size"], video["pipedit"]["num_frames"]) == ("completed", "64x48", 5), video
        assert read_mp4(path).shape == (5, 48, 64, 3)
    a, b = (read_mp4(path).astype(np.float32) for path in seen["files"])
    assert np.abs(a - b).mean() > 0.0  # another image, another video: the image reached the model
