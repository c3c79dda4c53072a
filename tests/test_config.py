from pathlib import Path

import pytest

from pipedit.config import EngineConfig, ParallelConfig, load_config
from pipedit.errors import UserInputError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_load(name):
    config = load_config(CONFIGS / name)
    assert config.generation.steps >= 1


def test_flags_override_only_given_values():
    config = EngineConfig().with_overrides("generation", steps=3, height=None)
    assert config.generation.steps == 3
    assert config.generation.height == EngineConfig().generation.height


@pytest.mark.parametrize(
    "text,message",
    [
        ("parallel: {ulysses: 2, bogus: 1}", "unknown keys ['bogus'] in 'parallel'"),
        ("extra: {}", "unknown sections ['extra']"),
        ("model: {dtype: int8}", "dtype 'int8' is not supported"),
        ("parallel: {pipesp_chunk: 0}", "pipesp_chunk must be"),
        ("model: {vae_tiling: maybe}", "vae_tiling must be one of auto, on, off, got 'maybe'"),
        ("model: {vae_tiling: on}", "got True: quote on and off in YAML"),
        ("- a list", "must be a mapping"),
    ],
)
def test_bad_config_files(tmp_path, text, message):
    file = tmp_path / "c.yaml"
    file.write_text(text)
    with pytest.raises(UserInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(file)


def test_generate_reads_a_config_file(demo_checkpoint, tmp_path):
    from pipedit.cli import build_parser
    from pipedit.cli.flags import engine_config

    file = tmp_path / "c.yaml"
    file.write_text(f"model: {{path: {demo_checkpoint}}}\ngeneration: {{steps: 4, seed: 9}}\n")
    args = build_parser().parse_args(["generate", "--prompt", "p", "--output", "o.mp4", "--config", str(file), "--seed", "5"])
    config = engine_config(args)
    assert config.model.path == str(demo_checkpoint)
    assert (config.generation.steps, config.generation.seed) == (4, 5)
    assert config.parallel == ParallelConfig()


def test_vae_tiling_from_file_and_flag(tmp_path):
    from pipedit.cli import build_parser
    from pipedit.cli.flags import engine_config

    assert EngineConfig().model.vae_tiling == "auto"
    file = tmp_path / "c.yaml"
    file.write_text("model: {vae_tiling: 'on'}\n")
    argv = ["generate", "--prompt", "p", "--output", "o.mp4", "--config", str(file)]
    assert engine_config(build_parser().parse_args(argv)).model.vae_tiling == "on"
    assert engine_config(build_parser().parse_args([*argv, "--vae-tiling", "off"])).model.vae_tiling == "off"
