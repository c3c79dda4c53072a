"""pipedit's own loop and adapter against diffusers' HunyuanVideoPipeline on the demo model.

Tolerances: both run the same fp32 modules on the same CPU in the same op order, so differences
should be exactly zero; 1e-4 (latents) and 1e-3 (frames in [0, 1]) are the contract's bounds.
"""

import pytest
import torch

from pipedit.cli import main
from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from pipedit.video import read_mp4
from reference_cache import cached

SHAPES = [(128, 128, 17), (96, 160, 9)]
PROMPT = "a red fox runs through fresh snow"


def _reference(pipe, height, width, frames, steps, seed, output_type):
    return pipe(
        prompt=PROMPT, height=height, width=width, num_frames=frames, num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(seed), output_type=output_type,
    ).frames


@pytest.mark.parametrize("height,width,frames", SHAPES)
def test_cli_latents_equal_diffusers(demo_checkpoint, diffusers_pipeline, tmp_path, height, width, frames):
    video, latents_file = tmp_path / "out.mp4", tmp_path / "latents.pt"
    code = main([
        "generate", "--prompt", PROMPT, "--model-path", str(demo_checkpoint), "--height", str(height),
        "--width", str(width), "--num-frames", str(frames), "--steps", "3", "--seed", "11",
        "--output", str(video), "--save-latents", str(latents_file),
    ])
    assert code == 0
    ours = torch.load(latents_file)
    reference = _reference(diffusers_pipeline, height, width, frames, 3, 11, "latent")
    assert ours.shape == reference.shape
    assert (ours - reference).abs().max().item() <= 1e-4
    assert read_mp4(video).shape == (frames, height, width, 3)


@pytest.mark.parametrize("height,width,frames", SHAPES)
def test_decoded_frames_equal_diffusers(demo_checkpoint, diffusers_pipeline, engines, height, width, frames):
    engine = engines.get(EngineConfig(model=ModelConfig(path=str(demo_checkpoint))))
    request = VideoRequest(PROMPT, height=height, width=width, num_frames=frames, steps=2, seed=3)
    ours = engine.generate(request).frames
    reference = torch.from_numpy(_reference(diffusers_pipeline, height, width, frames, 2, 3, "np")[0])
    assert ours.shape == reference.shape == (frames, height, width, 3)
    assert (ours - reference).abs().max().item() <= 1e-3


def test_same_seed_same_video_other_seed_other_video(demo_checkpoint, engines):
    engine = engines.get(EngineConfig(model=ModelConfig(path=str(demo_checkpoint))))
    first = engine.generate(VideoRequest(PROMPT, num_frames=5, steps=2, seed=1)).latents
    again = engine.generate(VideoRequest(PROMPT, num_frames=5, steps=2, seed=1)).latents
    other = engine.generate(VideoRequest(PROMPT, num_frames=5, steps=2, seed=2)).latents
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)


def test_stored_dtypes_load_as_diffusers_loads_them(demo_checkpoint, tmp_path):
    """A checkpoint whose text encoders are stored in bfloat16 (as released checkpoints often
    are): with dtype auto on CPU, pipedit loads every component as diffusers' default
    from_pretrained does, so the results still match the reference."""
    import shutil

    from diffusers import HunyuanVideoPipeline
    from transformers import CLIPTextModel, LlamaModel

    mixed = tmp_path / "mixed"
    shutil.copytree(demo_checkpoint, mixed)
    for name, model_class in (("text_encoder", LlamaModel), ("text_encoder_2", CLIPTextModel)):
        model_class.from_pretrained(mixed / name).to(torch.bfloat16).save_pretrained(mixed / name)
    reference_pipe = cached(HunyuanVideoPipeline.from_pretrained(mixed), mixed)
    assert reference_pipe.text_encoder.dtype == torch.bfloat16
    reference_pipe.set_progress_bar_config(disable=True)
    reference = reference_pipe(prompt=PROMPT, height=64, width=64, num_frames=5, num_inference_steps=2,
                               generator=torch.Generator("cpu").manual_seed(4), output_type="latent").frames
    with Engine(EngineConfig(model=ModelConfig(path=str(mixed)))) as engine:
        ours = engine.generate(VideoRequest(PROMPT, height=64, width=64, num_frames=5, steps=2, seed=4)).latents
    assert (ours - reference).abs().max().item() <= 1e-4


def test_a_shifted_run_equals_diffusers_with_that_shift(demo_checkpoint, diffusers_pipeline, engines):
    """flow_shift 2 (the demo's scheduler has 7): diffusers' pipeline with its scheduler rebuilt by
    FlowMatchEulerDiscreteScheduler.from_config(config, shift=2.0)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline

    shifted = FlowMatchEulerDiscreteScheduler.from_config(diffusers_pipeline.scheduler.config, shift=2.0)
    pipe = cached(HunyuanVideoPipeline(**dict(diffusers_pipeline.components, scheduler=shifted)), demo_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    request = VideoRequest(PROMPT, num_frames=5, steps=3, seed=4, flow_shift=2.0)
    engine = engines.get(EngineConfig(model=ModelConfig(path=str(demo_checkpoint))))
    ours, unshifted = engine.generate(request).latents, engine.generate(VideoRequest(
        PROMPT, num_frames=5, steps=3, seed=4)).latents
    reference = _reference(pipe, 128, 128, 5, 3, 4, "latent")
    assert (ours - reference).abs().max().item() <= 1e-4
    assert (unshifted - reference).abs().max().item() > 1e-2  # the shift is applied
