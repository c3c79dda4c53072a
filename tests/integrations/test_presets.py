"""Checkpoint presets: the registry, and the full-width preset's shapes (built on the meta device,
so the fast tests never allocate its ~3.6 GB) plus one slow test that writes it."""

import inspect
import json
import shutil

import pytest
import torch

from pipedit.cli import main
from pipedit.integrations.hunyuan_video.presets import DEFAULT_PRESET, PRESETS, preset_builder

FULL_WIDTH = "hunyuan-video-full-width"
COMPONENTS = ["scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "transformer", "vae"]
# Scaled down on purpose in the preset; every other argument must keep diffusers' (the release's) default.
SCALED_DOWN = {"num_layers", "num_single_layers", "text_embed_dim", "pooled_projection_dim"}


def _defaults(cls):
    return {
        name: param.default for name, param in inspect.signature(cls.__init__).parameters.items()
        if param.default is not inspect.Parameter.empty
    }


@pytest.fixture(scope="module")
def full_width_on_meta():
    with torch.device("meta"):
        return preset_builder(FULL_WIDTH)()


def test_every_preset_resolves_and_the_demo_is_the_default():
    assert DEFAULT_PRESET == "hunyuan-video-demo" and FULL_WIDTH in PRESETS
    for name in PRESETS:
        assert callable(preset_builder(name))


def test_unknown_preset_exits_2_listing_the_presets(tmp_path, capsys):
    assert main(["demo-checkpoint", "--preset", "nope", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'nope'" in err
    assert all(name in err for name in PRESETS)
    assert not (tmp_path / "x").exists()


def test_full_width_transformer_has_the_release_block_shapes(full_width_on_meta):
    model = full_width_on_meta.transformer
    attn = model.transformer_blocks[0].attn
    assert attn.to_q.weight.shape == (3072, 3072)
    assert attn.heads == 24 and attn.to_q.out_features // attn.heads == 128
    assert model.single_transformer_blocks[0].attn.heads == 24
    assert list(model.rope.rope_dim) == [16, 56, 56]
    assert model.x_embedder.proj.kernel_size == (1, 2, 2)
    assert (len(model.transformer_blocks), len(model.single_transformer_blocks)) == (2, 2)
    assert len(model.context_embedder.token_refiner.refiner_blocks) == 2
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_full_width_transformer_keeps_every_released_default(full_width_on_meta):
    from diffusers import HunyuanVideoTransformer3DModel

    config = full_width_on_meta.transformer.config
    for name, default in _defaults(HunyuanVideoTransformer3DModel).items():
        if name not in SCALED_DOWN:
            assert config[name] == default, name


def test_full_width_text_widths_follow_the_small_encoders(full_width_on_meta):
    pipe = full_width_on_meta
    assert pipe.transformer.context_embedder.proj_in.in_features == pipe.text_encoder.config.hidden_size
    pooled_in = pipe.transformer.time_text_embed.text_embedder.linear_1.in_features
    assert pooled_in == pipe.text_encoder_2.config.hidden_size


def test_full_width_vae_is_the_released_config(full_width_on_meta):
    from diffusers import AutoencoderKLHunyuanVideo

    config = full_width_on_meta.vae.config
    assert {name: config[name] for name in _defaults(AutoencoderKLHunyuanVideo)} == _defaults(AutoencoderKLHunyuanVideo)
    assert tuple(config["block_out_channels"]) == (128, 256, 512, 512) and config["latent_channels"] == 16
    assert {p.dtype for p in full_width_on_meta.vae.parameters()} == {torch.float32}


@pytest.fixture
def full_width_dir(tmp_path):
    # pytest keeps the temporary folders of recent runs; 3.6 GB each is too much to keep.
    yield tmp_path / "full-width"
    shutil.rmtree(tmp_path / "full-width", ignore_errors=True)


@pytest.mark.slow
def test_full_width_checkpoint_writes_and_loads(full_width_dir, capsys):
    from safetensors import safe_open

    from pipedit.components import load_component, read_component_config

    target = full_width_dir
    assert main(["demo-checkpoint", "--preset", FULL_WIDTH, str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    index = json.loads((target / "model_index.json").read_text())
    assert sorted(k for k in index if not k.startswith("_")) == COMPONENTS
    assert all((target / name).is_dir() for name in COMPONENTS)
    config = read_component_config(target, "transformer")
    assert (config["num_attention_heads"], config["attention_head_dim"], config["num_layers"]) == (24, 128, 2)
    with safe_open(target / "transformer" / "diffusion_pytorch_model.safetensors", framework="pt") as f:
        weight = f.get_tensor("single_transformer_blocks.1.attn.to_k.weight")
    assert weight.shape == (3072, 3072) and weight.dtype == torch.bfloat16
    with safe_open(target / "vae" / "diffusion_pytorch_model.safetensors", framework="pt") as f:
        assert f.get_tensor("decoder.conv_out.conv.weight").dtype == torch.float32
    transformer = load_component(target, index, "transformer", dtype=torch.bfloat16)
    assert len(transformer.single_transformer_blocks) == 2
    assert transformer.single_transformer_blocks[1].attn.to_k.weight.shape == weight.shape
