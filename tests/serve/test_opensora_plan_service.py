"""The server serves OpenSoraPlan when its config names the model (official layout, no model_index.json)."""

import pytest

from pipedit.config import EngineConfig, ModelConfig
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.from_config import model_name_for, open_service
from pipedit.video import read_mp4
from serve_helpers import wait_for


def test_the_demo_model_is_named_after_its_family():
    assert model_name_for(EngineConfig(model=ModelConfig(name="opensora-plan"))) == "opensora-plan-demo"
    assert model_name_for(EngineConfig()) == "hunyuan-video-demo"


def test_a_job_on_opensora_plan_completes_and_bad_shapes_are_refused(osp_demo, tmp_path):
    config = EngineConfig(model=ModelConfig(path=str(osp_demo), name="opensora-plan"))
    service = open_service(config, tmp_path)
    try:
        options = service.options()  # what the web page offers: OpenSoraPlan's 4k+1 frames, multiples of 16
        assert options["frame_counts"][:3] == [1, 5, 9] and options["size_multiple"] == 16
        with pytest.raises(Exception, match="multiples of 16"):
            service.create(VideoCreateParams(prompt="a boat", size="40x32", num_frames=5))
        with pytest.raises(Exception, match=r"4\*k\+1"):
            service.create(VideoCreateParams(prompt="a boat", size="48x32", num_frames=6))
        video = service.create(VideoCreateParams(prompt="a boat", size="48x32", num_frames=5, num_inference_steps=2))
        assert video.model == "osp-demo"
        wait_for(lambda: service.get(video.id).status in ("completed", "failed"), timeout=120)
        assert service.get(video.id).status == "completed", service.get(video.id).error
        assert read_mp4(service.content_path(video.id)).shape == (5, 32, 48, 3)
    finally:
        service.shutdown()
