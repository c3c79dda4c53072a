"""pipedit's Wan2.1 text-to-video adapter, run through its own engine and CLI, against diffusers'
WanPipeline on a tiny random checkpoint with other sizes than the demo (3 heads of 8, text width 24).

Tolerances: both sides run the same fp32 modules on the same CPU; pipedit batches the [negative,
positive] branches in one forward where WanPipeline runs two, which may move the last float bits,
so latents are compared at the contract's 1e-4 relative (max |diff| / max |reference|) and the
decoded frames in [0, 1] at 1e-3 (the same bound as the HunyuanVideo parity tests). The text
embeddings differ from WanPipeline's by ~4e-7 relative (it encodes with autograd on): 1e-5.
"""

import json
from dataclasses import replace
import shutil

import pytest
import torch

from pipedit.adapter import VideoShape, load_adapter
from pipedit.cli import main
from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import InvalidRequestError, ModelPathError, UserInputError
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from pipedit.video import read_mp4
from reference_cache import cached

# An HTML entity escaped twice, runs of spaces and a tab: WanPipeline cleans all of them.
PROMPT = "a  red fox &amp;amp; a   hare,\tin fresh snow "
HEIGHT, WIDTH, FRAMES = 48, 80, 9


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "tiny",
                                 WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=5))


@pytest.fixture(scope="module")
def reference_pipe(tiny_wan):
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(tiny_wan)
    pipe.set_progress_bar_config(disable=True)
    return cached(pipe, tiny_wan)


@pytest.fixture(scope="module")
def engine(tiny_wan):
    with Engine(EngineConfig(model=ModelConfig(path=str(tiny_wan)))) as engine:
        yield engine


def _reference(pipe, steps, seed, guidance, output_type="latent"):
    return pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=steps,
                guidance_scale=guidance, generator=torch.Generator("cpu").manual_seed(seed),
                output_type=output_type).frames


def _relative(ours, reference):
    assert ours.shape == reference.shape
    return ((ours - reference).abs().max() / reference.abs().max()).item()


def test_prompt_needs_cleaning_and_is_cleaned_as_diffusers_cleans_it():
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean
    from pipedit.integrations.wan.text_encoding import clean_prompt

    assert clean_prompt(PROMPT) == prompt_clean(PROMPT) == "a red fox & a hare, in fresh snow"
    assert clean_prompt("x\x1cy") == prompt_clean("x\x1cy")  # Unicode White_Space, not str.isspace


def test_text_embeddings_equal_diffusers(tiny_wan, reference_pipe):
    """Zero-filled padding to 512 tokens and the empty negative prompt, as WanPipeline encodes them."""
    adapter = load_adapter(tiny_wan, parts={"text"})
    ours = adapter.encode_prompt(PROMPT)
    positive, negative = reference_pipe.encode_prompt(PROMPT, device="cpu", max_sequence_length=512)
    assert ours["prompt_embeds"].shape == (1, 512, 24)
    assert _relative(ours["prompt_embeds"], positive) <= 1e-5
    assert _relative(ours["negative_prompt_embeds"], negative) <= 1e-5
    assert not ours["prompt_embeds"][0, -1].any()  # padding positions are zeros


@pytest.mark.parametrize("guidance", [5.0, 1.0])  # with CFG ([negative, positive]) and without
def test_engine_latents_and_frames_equal_diffusers(engine, reference_pipe, guidance):
    request = VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=4, seed=7,
                           guidance_scale=guidance)
    result = engine.generate(request)
    assert _relative(result.latents, _reference(reference_pipe, 4, 7, guidance)) <= 1e-4
    assert result.timings["cfg_branches"] == (2.0 if guidance > 1 else 1.0)  # guidance branches per step
    if guidance > 1:
        frames = torch.from_numpy(_reference(reference_pipe, 4, 7, guidance, "np")[0])
        assert result.frames.shape == frames.shape == (FRAMES, HEIGHT, WIDTH, 3)
        assert (result.frames - frames).abs().max().item() <= 1e-3


def test_cli_generate_writes_the_video_of_diffusers_latents(tiny_wan, reference_pipe, tmp_path):
    video, latents_file = tmp_path / "out.mp4", tmp_path / "latents.pt"
    code = main(["generate", "--prompt", PROMPT, "--model-path", str(tiny_wan), "--height", str(HEIGHT),
                 "--width", str(WIDTH), "--num-frames", str(FRAMES), "--steps", "3", "--seed", "11",
                 "--guidance-scale", "4.0", "--output", str(video), "--save-latents", str(latents_file)])
    assert code == 0
    assert _relative(torch.load(latents_file), _reference(reference_pipe, 3, 11, 4.0)) <= 1e-4
    assert read_mp4(video).shape == (FRAMES, HEIGHT, WIDTH, 3)


def test_fbcache_zero_is_the_uncached_run_and_teacache_is_refused(engine):
    """fbcache:0 never skips and a computed step returns the blocks' own output: bit for bit."""
    request = VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=3, guidance_scale=4.0)
    uncached = engine.generate(request).latents
    assert torch.equal(engine.generate(replace(request, cache="fbcache:0")).latents, uncached)
    with pytest.raises(InvalidRequestError, match="families that have them: hunyuan-video"):
        engine.generate(replace(request, cache="teacache:0.1"))


def test_unsupported_wan_checkpoints_and_options_are_refused(tiny_wan, tmp_path):
    no_second_expert = tmp_path / "a14b"
    shutil.copytree(tiny_wan, no_second_expert)
    index = json.loads((no_second_expert / "model_index.json").read_text())
    index.update(boundary_ratio=0.875)  # two experts named, transformer_2 absent
    (no_second_expert / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ModelPathError, match="sets boundary_ratio 0.875 but has no transformer_2"):
        load_adapter(no_second_expert, parts=set())
    with pytest.raises(UserInputError, match="use auto or off"):
        load_adapter(tiny_wan, parts=set(), vae_tiling="on")
    with pytest.raises(InvalidRequestError, match="multiples of 16"):
        load_adapter(tiny_wan, parts=set()).validate(VideoShape(40, 80, 9), 2)


def test_demo_checkpoint_cli_writes_a_wan_pipeline(tmp_path, capsys):
    assert main(["demo-checkpoint", "--model", "wan", str(tmp_path / "demo")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "demo")
    index = json.loads((tmp_path / "demo" / "model_index.json").read_text())
    assert index["_class_name"] == "WanPipeline"
    scheduler = json.loads((tmp_path / "demo" / "scheduler" / "scheduler_config.json").read_text())
    assert (scheduler["_class_name"], scheduler["prediction_type"], scheduler["flow_shift"]) == (
        "UniPCMultistepScheduler", "flow_prediction", 3.0)


def test_dry_run_of_bare_wan_names_the_wan_releases(capsys):
    from pathlib import Path

    config = Path(__file__).resolve().parents[3] / "configs" / "demo-cpu.yaml"
    assert main(["dry-run", "--config", str(config), "--model", "wan", "--height", "64", "--width", "64",
                 "--frames", "5"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--model wan-1.3b | wan-14b | wan-a14b | wan-ti2v-5b" in err
