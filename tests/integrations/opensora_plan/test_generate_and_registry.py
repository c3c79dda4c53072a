"""`pipedit demo-checkpoint --model opensora-plan` writes the official layout, `pipedit generate`
runs it end to end on CPU, and the registry finds the adapter by name, by model_index.json or by
the official layout, with clear errors otherwise."""

import json
import shutil

import pytest

from pipedit.adapter import VideoShape, adapter_class_for, attention_heads, model_name_for, shape_validator
from pipedit.cli import main
from pipedit.config import ModelConfig, load_config
from pipedit.errors import InvalidRequestError, ModelPathError, UserInputError
from pipedit.video import read_mp4


def test_demo_checkpoint_has_the_official_layout(osp_demo):
    transformer = osp_demo / "any93x640x640"
    config = json.loads((transformer / "config.json").read_text())
    assert config["_class_name"] == "OpenSoraT2V_v1_3" and isinstance(config["sample_size_h"], list)
    assert {"decay", "optimization_step", "use_ema_warmup"} <= set(config)
    assert config["num_layers"] >= 5 and config["sparse1d"] and config["sparse_n"] == 4
    index = json.loads((transformer / "diffusion_pytorch_model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [
        "diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"]
    assert "transformer_blocks.0.attn1.to_q.weight" in index["weight_map"]
    assert (osp_demo / "vae" / "config.json").is_file() and (osp_demo / "vae" / "merged.ckpt").is_file()
    assert (osp_demo / "text_encoder" / "config.json").is_file()
    assert not (osp_demo / "model_index.json").exists()


def test_generate_writes_the_requested_frames_and_size(osp_demo, tmp_path, capsys):
    output = tmp_path / "video.mp4"
    code = main(["generate", "--model", "opensora-plan", "--model-path", str(osp_demo), "--prompt", "a cat",
                 "--output", str(output), "--height", "32", "--width", "48", "--num-frames", "9", "--steps", "2",
                 "--guidance-scale", "7.5", "--text-encoder-path", str(osp_demo / "text_encoder")])
    assert code == 0, capsys.readouterr().err
    assert read_mp4(output).shape == (9, 32, 48, 3)


@pytest.mark.parametrize("flags, message", [
    (["--num-frames", "10"], "num_frames must be 4\\*k\\+1"),
    (["--height", "40"], "multiples of 16"),
])
def test_bad_shapes_get_clear_errors(osp_demo, tmp_path, capsys, flags, message):
    code = main(["generate", "--model-path", str(osp_demo), "--prompt", "a cat", "--output",
                 str(tmp_path / "v.mp4"), "--steps", "1", "--height", "32", "--width", "32", "--num-frames", "5", *flags])
    assert code == 2
    import re

    assert re.search(message, capsys.readouterr().err)


def test_shape_validator_reads_configs_only(osp_demo):
    validate = shape_validator(osp_demo)
    validate(VideoShape(352, 640, 93), 100)
    with pytest.raises(InvalidRequestError, match="num_frames must be 4\\*k\\+1"):
        validate(VideoShape(352, 640, 92), 100)
    with pytest.raises(InvalidRequestError, match="multiples of 16.*got 360x640"):
        validate(VideoShape(360, 640, 93), 100)


def test_registry_by_name_by_layout_and_errors(osp_demo, demo_checkpoint, tmp_path):
    assert model_name_for(osp_demo) == "opensora-plan"  # detected: any93x640x640/ and vae/
    assert model_name_for(demo_checkpoint) == "hunyuan-video"  # model_index.json
    assert adapter_class_for(osp_demo, "opensora-plan").family == "opensora-plan"
    assert attention_heads(osp_demo) == 2
    with pytest.raises(ModelPathError, match="unknown model 'sora'.*hunyuan-video, opensora-plan"):
        adapter_class_for(osp_demo, "sora")
    with pytest.raises(ModelPathError, match="model_index.json is missing"):
        shape_validator(osp_demo, "hunyuan-video")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelPathError, match="model_index.json is missing.*--model"):
        model_name_for(tmp_path / "empty")
    # Another transformer folder name is found by its config's class; two of them are ambiguous.
    renamed = tmp_path / "renamed"
    shutil.copytree(osp_demo, renamed)
    (renamed / "any93x640x640").rename(renamed / "any93x352x640")
    assert attention_heads(renamed) == 2
    shutil.copytree(renamed / "any93x352x640", renamed / "any93x480x480")
    with pytest.raises(ModelPathError, match="several OpenSoraT2V_v1_3 folders"):
        attention_heads(renamed)


def test_config_carries_model_name_and_text_encoder(tmp_path):
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[3] / "configs" / "opensora-plan-8gpu.yaml")
    assert config.model.name == "opensora-plan" and config.model.text_encoder_path
    assert config.parallel.text_encoder == "dit"
    with pytest.raises(UserInputError, match="model name must be one of hunyuan-video, opensora-plan"):
        ModelConfig(name="opensora")


def test_ring_attention_is_refused_up_front(osp_demo, tmp_path, capsys):
    code = main(["generate", "--model-path", str(osp_demo), "--prompt", "a cat", "--output", str(tmp_path / "v.mp4"),
                 "--steps", "1", "--height", "32", "--width", "32", "--num-frames", "5", "--ring", "2"])
    assert code == 2
    assert "use --ulysses 2 --ring 1" in capsys.readouterr().err


def test_default_model_path_of_opensora_plan_is_its_demo(osp_demo, tmp_path, monkeypatch):
    from pipedit.integrations.opensora_plan.demo_checkpoint import DEMO_VERSION
    from pipedit.runtime.engine import resolve_model_path

    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    shutil.copytree(osp_demo, tmp_path / DEMO_VERSION)  # already built: reused, not rewritten
    assert resolve_model_path(None, "opensora-plan") == tmp_path / DEMO_VERSION
    assert model_name_for(resolve_model_path(None, "opensora-plan")) == "opensora-plan"


def test_adapter_decode_tiling_option_and_uint8_truncation(osp_demo):
    import torch

    from pipedit.adapter import load_adapter

    latents = torch.randn(1, 8, 3, 4, 4, generator=torch.Generator().manual_seed(2))
    untiled = load_adapter(osp_demo, parts={"vae"}, vae_tiling="off").decode(latents)
    tiled = load_adapter(osp_demo, parts={"vae"}, vae_tiling="on").decode(latents)
    assert untiled.shape == (1, 9, 32, 32, 3)
    # odd T: equal up to float rounding, which may move a pixel one uint8 level; k/255 - (k+1)/255 in
    # float32 is 1/255 plus up to 3e-8
    assert (tiled - untiled).abs().max().item() <= 1 / 255 + 1e-6
    levels = untiled * 255
    assert torch.equal(levels, levels.round()) and 0 <= untiled.min() and untiled.max() <= 1
    with pytest.raises(UserInputError, match="vae_tiling must be one of auto, on, off"):
        load_adapter(osp_demo, parts=set(), vae_tiling="yes")
