"""The LTX-2 adapter's own rules, without diffusers' pipelines: the joint latents' layout, the
sound's length, the shapes it takes, the guidance passes per step, the refused pipelines and the
demo checkpoint command."""

import json

import pytest
import torch

from pipedit.adapter import VideoShape, model_inputs
from pipedit.cli import main
from pipedit.errors import InvalidRequestError, ModelPathError
from pipedit.guidance import branch_passes
from pipedit.integrations.ltx2.demo_checkpoint import write_preset
from pipedit.integrations.ltx2.latents import JointGrid


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_preset(tmp_path_factory.mktemp("ltx2") / "demo", "t2v")


def test_the_joint_latents_hold_both_streams_and_give_them_back():
    grid = JointGrid(channels=3, frames=2, height=2, width=3, audio_channels=2, audio_frames=5, mel_bins=4)
    video, audio = torch.randn(1, 3, 2, 2, 3), torch.randn(1, 2, 5, 4)
    joint = grid.join(video, audio)
    assert joint.shape == grid.shape == (1, 3 + 4, 2, 2, 3)  # 40 sound values fill 4 channels of 12 cells
    assert torch.equal(grid.video(joint), video) and torch.equal(grid.audio(joint), audio)
    assert torch.equal(joint[:, 3:].flatten()[40:], torch.zeros(8))  # the padding is zero
    video_tokens, audio_tokens = grid.tokens(joint)
    assert video_tokens.shape == (1, 12, 3) and audio_tokens.shape == (1, 5, 8)
    assert torch.equal(grid.from_tokens(video_tokens, audio_tokens), joint)


def test_the_sound_lasts_as_long_as_the_video(demo):
    adapter = model_inputs(demo)
    # 16 kHz, hop 160, 4x compressed: 25 latent frames a second, rounded as the pipeline rounds.
    assert adapter.audio_frames(VideoShape(32, 64, 9, 24)) == round(9 / 24 * 25) == 9
    assert adapter.audio_frames(VideoShape(32, 64, 9, 12)) == 19
    assert adapter.audio_frames(VideoShape(32, 64, 49, 24)) == 51


def test_sizes_follow_the_pipeline(demo):
    adapter = model_inputs(demo)
    adapter.validate(VideoShape(32, 96, 9), 2)
    with pytest.raises(InvalidRequestError, match="multiples of 32"):
        adapter.validate(VideoShape(32, 48, 9), 2)  # the VAE's stride (8) allows it; LTX2Pipeline does not
    with pytest.raises(InvalidRequestError, match="num_frames must be 4"):
        adapter.validate(VideoShape(32, 64, 8), 2)


def test_guidance_above_one_runs_four_passes_and_at_most_one_runs_one(demo):
    adapter = model_inputs(demo)
    cond = {"prompt_embeds": torch.zeros(1, 4, 8), "audio_prompt_embeds": torch.zeros(1, 4, 8),
            "prompt_mask": torch.ones(1, 4, dtype=torch.int64), "grid": torch.empty(0, 3, 4, 8, 9, 24)}
    guided = {**cond, **{f"negative_{k}": v for k, v in cond.items() if k != "grid"}}
    assert [b["kind"] for b in adapter.branches_for(guided, 4.0)] == ["negative", "positive", "stg", "isolated"]
    assert branch_passes(adapter, guided, 4.0) == 4 and branch_passes(adapter, cond, 1.0) == 1
    with pytest.raises(RuntimeError, match="needs the negative branch"):
        adapter.branches_for(cond, 4.0)


def test_the_other_ltx2_pipelines_are_refused_naming_what_runs(demo, tmp_path):
    folder = tmp_path / "upsampler"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "LTX2LatentUpsamplePipeline"}))
    with pytest.raises(ModelPathError, match="latent upsampler.*LTX2Pipeline, LTX2ImageToVideoPipeline"):
        model_inputs(folder)


def test_step_caching_is_refused(demo):
    assert model_inputs(demo).cache_blocks() is None  # the engine refuses a cache for such a model


def test_the_demo_checkpoint_command_writes_each_preset(tmp_path):
    for preset, pipeline in (("t2v", "LTX2Pipeline"), ("i2v", "LTX2ImageToVideoPipeline")):
        assert main(["demo-checkpoint", "--model", "ltx-2", "--preset", preset, str(tmp_path / preset)]) == 0
        assert json.loads((tmp_path / preset / "model_index.json").read_text())["_class_name"] == pipeline
    assert model_inputs(tmp_path / "i2v").capabilities.needs_image
