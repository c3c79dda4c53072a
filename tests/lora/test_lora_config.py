"""The run's LoRA set as flags and config give it, and what it changes in a render's resume key."""

import re

import pytest

from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import UserInputError
from pipedit.lora.spec import LoraSpec, parse_lora


def test_flag_form_parses_path_scale_and_experts():
    assert parse_lora("a.safetensors") == LoraSpec("a.safetensors", 1.0, "transformer")
    assert parse_lora("x/a.safetensors:0.5") == LoraSpec("x/a.safetensors", 0.5)
    assert parse_lora("a.safetensors:2:both") == LoraSpec("a.safetensors", 2.0, "both")
    assert parse_lora("a.safetensors:transformer_2") == LoraSpec("a.safetensors", 1.0, "transformer_2")
    with pytest.raises(UserInputError, match="SCALE a number"):
        parse_lora("a.safetensors:half:both")
    with pytest.raises(UserInputError, match="finite number"):
        parse_lora("a.safetensors:nan")
    with pytest.raises(UserInputError, match="experts must be one of"):
        ModelConfig(run_loras=[{"path": "a.safetensors", "experts": "second"}])
    with pytest.raises(UserInputError, match="fuse_loras needs adapters"):
        ModelConfig(fuse_loras=True)


def test_a_local_renders_model_identity_holds_the_adapters(tmp_path):
    from pipedit.render.local import model_identity

    plain = EngineConfig(model=ModelConfig(path=str(tmp_path)))
    assert model_identity(plain) == str(tmp_path.resolve())  # unchanged without adapters: old renders resume
    with_a = EngineConfig(model=ModelConfig(path=str(tmp_path), run_loras=["a.safetensors:0.5"]))
    with_b = EngineConfig(model=ModelConfig(path=str(tmp_path), run_loras=["a.safetensors:0.6"]))
    fused = EngineConfig(model=ModelConfig(path=str(tmp_path), run_loras=["a.safetensors:0.5"], fuse_loras=True))
    assert len({model_identity(plain), model_identity(with_a), model_identity(with_b)}) == 3
    assert model_identity(fused) == model_identity(with_a)


def test_flags_replace_the_configs_list(tmp_path):
    from pipedit.cli import build_parser
    from pipedit.cli.flags import engine_config

    config_file = tmp_path / "run.yaml"
    config_file.write_text("model:\n  run_loras:\n    - {path: a.safetensors, scale: 0.5, experts: both}\n")
    parser = build_parser()
    args = parser.parse_args(["generate", "--prompt", "x", "--output", "o.mp4", "--config", str(config_file)])
    assert engine_config(args).model.run_loras == (LoraSpec("a.safetensors", 0.5, "both"),)
    args = parser.parse_args(["generate", "--prompt", "x", "--output", "o.mp4", "--config", str(config_file), "--lora", "b.safetensors",
                              "--lora", "c.safetensors:2", "--fuse-loras"])
    model = engine_config(args).model
    assert model.run_loras == (LoraSpec("b.safetensors"), LoraSpec("c.safetensors", 2.0)) and model.fuse_loras


@pytest.mark.parametrize("old, new", [("lora", "model.run_loras"), ("loras", "model.offered_loras")])
def test_the_renamed_keys_are_refused_naming_the_new_one(tmp_path, old, new):
    from pipedit.config import load_config

    config_file = tmp_path / "old.yaml"
    config_file.write_text(f"model:\n  {old}: []\n")
    with pytest.raises(UserInputError, match=f"model.{old} was renamed: write {new}"):
        load_config(config_file)


@pytest.mark.parametrize("scale", [1e30, 1e308, -1e308, 10.5])
def test_a_finite_but_absurd_scale_is_refused_by_the_config_and_by_a_request(scale):
    # The review: loras scale 1e30, 1e308 or -1e308 ran to a completed black video.
    from pipedit.request import VideoRequest

    words = re.escape(f"must be a finite number between -10 and 10, got {scale!r}")
    with pytest.raises(UserInputError, match=f"LoRA scale {words}"):
        ModelConfig(run_loras=[{"path": "a.safetensors", "scale": scale}])
    with pytest.raises(UserInputError, match=f"LoRA scale {words}"):
        parse_lora(f"a.safetensors:{scale!r}")
    with pytest.raises(UserInputError, match=f"loras: the scale of 'style' {words}"):
        VideoRequest("a fox", loras=[{"name": "style", "scale": scale}])
    assert VideoRequest("a fox", loras=[{"name": "style", "scale": -10}]).loras == (("style", -10.0),)
