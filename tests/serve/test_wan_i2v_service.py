"""Image-to-video served end to end: the tiny Wan2.1 I2V demo checkpoint (WanImageToVideoPipeline)
on a real engine loop, driven by the official openai SDK (2.x and 3.x) with `input_reference`
as a multipart file, and as a data URL object (multipart in 3.x, JSON in 2.x). The jobs complete with the frames and
size asked for; that the engine's latents equal diffusers' pipeline is tests/integrations/wan."""

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

I2V_CLIENT = Path(__file__).with_name("sdk_i2v_client.py")


@pytest.fixture(scope="module")
def wan_i2v(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import write_demo_checkpoint

    checkpoint = tmp_path_factory.mktemp("models") / "wan-i2v-demo"
    write_demo_checkpoint(checkpoint, preset="i2v")
    data = tmp_path_factory.mktemp("data")
    engine = EngineLoop.from_config(EngineConfig(model=ModelConfig(path=str(checkpoint))))
    service = JobService(engine, JobStore.in_folder(data), data, "wan-i2v-demo", GenerationDefaults(48, 64, 5, 2),
                         validate=shape_validator(str(checkpoint)))
    url, stop = serve_in_thread(build_app(service))
    running = Running(engine, service, url, stop)
    yield running
    running.close()


def test_options_offer_the_image_picker_and_wans_shapes(wan_i2v):
    options = call("GET", f"{wan_i2v.url}/v1/pipedit/options").json()
    assert (options["takes_image"], options["needs_image"], options["takes_negative_prompt"]) == (True, True, True)
    assert options["size_multiple"] == 16  # the VAE's 8 x the patch's 2
    assert options["frame_counts"][:4] == [1, 5, 9, 13] and all((n - 1) % 4 == 0 for n in options["frame_counts"])
    reply = call("POST", f"{wan_i2v.url}/v1/videos", {"prompt": "a fox"})  # image-to-video needs the image
    assert reply.status == 400 and reply.json()["error"]["code"] == "missing_required_parameter"


@pytest.mark.parametrize("sdk", ["openai-3", "openai-2"])
def test_the_openai_sdk_makes_a_video_from_an_image(wan_i2v, sdk, tmp_path):
    first, second = image_bytes("png", (61, 37), (220, 30, 30)), image_bytes("webp", (50, 50), (20, 60, 230))
    (tmp_path / "a.png").write_bytes(first)
    (tmp_path / "b.webp").write_bytes(second)
    seen = run_client(sdk, wan_i2v.url, tmp_path, client=I2V_CLIENT, args=(tmp_path / "a.png", tmp_path / "b.webp"))
    assert seen["version"].startswith(sdk[-1] + ".")
    assert len(seen["videos"]) == 2
    for video, path, image in zip(seen["videos"], seen["files"], (first, second)):
        assert (video["status"], video["size"]) == ("completed", "64x48"), video
        assert video["pipedit"]["num_frames"] == 5 and video["pipedit"]["negative_prompt"] == "blurry"
        assert video["pipedit"]["input_reference"]["bytes"] == len(image)
        assert wan_i2v.service.store.image(video["id"]) == image
        assert read_mp4(path).shape == (5, 48, 64, 3)
    # Same prompt and seed, another image: another video (the image reached the model).
    a, b = (read_mp4(path).astype(np.float32) for path in seen["files"])
    assert np.abs(a - b).mean() > 1.0
