"""Few-step distilled use of Wan: a request's scheduler shift (flow_shift) and guidance at or below
1, and a checkpoint folder whose scheduler is another one than the release's, against diffusers'
WanPipeline with the same scheduler (diffusers 0.42.1, output_type="latent", same seed and CPU
generator).

Tolerance: without guidance both sides run one batch-1 forward per step with the same fp32
modules on the same CPU; the bound is the contract's 1e-4 relative (max |diff| / max |reference|).
A shift moves every sigma (5 vs the checkpoint's 3: the second of 4 sigmas goes from 0.90 to 0.94),
which moves the final latents by far more than that (checked, so that a shift that is not
applied cannot pass)."""

import json

import pytest
import torch

from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from reference_cache import cached

PROMPT = "a kite over the dunes at dusk"
SHAPE = {"height": 48, "width": 80, "num_frames": 9}
STEPS, SEED = 4, 3
DIMS = {"heads": 3, "head_dim": 8, "text_dim": 24, "ffn_dim": 40}


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "tiny", WanDims(**DIMS, seed=6))


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    """Another transformer, and the scheduler a step-distilled release names: flow-match Euler with
    its own shift (the release's UniPC with flow_shift 3 replaced)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    path = write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "distilled", WanDims(**DIMS, seed=7))
    for stale in (path / "scheduler").iterdir():
        stale.unlink()
    FlowMatchEulerDiscreteScheduler(shift=5.0).save_config(path / "scheduler")
    index = json.loads((path / "model_index.json").read_text())
    index["scheduler"] = ["diffusers", "FlowMatchEulerDiscreteScheduler"]  # the class diffusers loads
    (path / "model_index.json").write_text(json.dumps(index))
    return path


def _diffusers(path, guidance, scheduler=None):
    """WanPipeline's final latents; `scheduler(config)`: the scheduler to run instead of the
    checkpoint's own (built from its config)."""
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    if scheduler is not None:
        pipe.scheduler = scheduler(pipe.scheduler.config)
    return cached(pipe, path)(prompt=PROMPT, **SHAPE, num_inference_steps=STEPS, guidance_scale=guidance, output_type="latent",
                generator=torch.Generator("cpu").manual_seed(SEED)).frames


def _relative(ours, reference):
    assert ours.shape == reference.shape
    return ((ours - reference).abs().max() / reference.abs().max()).item()


def _request(guidance, flow_shift=None):
    return VideoRequest(PROMPT, **SHAPE, steps=STEPS, seed=SEED, guidance_scale=guidance, flow_shift=flow_shift)


def test_shifted_run_without_guidance_equals_diffusers_with_that_shift(tiny_wan):
    from diffusers import UniPCMultistepScheduler

    with Engine(EngineConfig(model=ModelConfig(path=str(tiny_wan)))) as engine:
        shifted = engine.generate(_request(1.0, flow_shift=5.0))
        below_one = engine.generate(_request(0.5, flow_shift=5.0)).latents
        unshifted = engine.generate(_request(1.0)).latents
    reference = _diffusers(tiny_wan, 1.0, lambda config: UniPCMultistepScheduler.from_config(config, flow_shift=5.0))
    assert _relative(shifted.latents, reference) <= 1e-4
    assert shifted.timings["cfg_branches"] == 1.0  # the conditional pass alone at every step
    # Below 1 too: no guidance (WanPipeline's guidance_scale > 1), the same passes bit for bit.
    assert torch.equal(below_one, shifted.latents)
    assert _relative(unshifted, reference) > 1e-2  # the checkpoint's own shift (3) gives other latents


def test_distilled_checkpoint_runs_with_its_own_scheduler_and_takes_a_shift(distilled):
    from diffusers import FlowMatchEulerDiscreteScheduler

    with Engine(EngineConfig(model=ModelConfig(path=str(distilled)))) as engine:
        own = engine.generate(_request(1.0)).latents
        shifted = engine.generate(_request(1.0, flow_shift=2.0)).latents
    assert _relative(own, _diffusers(distilled, 1.0)) <= 1e-4
    reference = _diffusers(distilled, 1.0, lambda config: FlowMatchEulerDiscreteScheduler.from_config(config, shift=2.0))
    assert _relative(shifted, reference) <= 1e-4
    assert _relative(own, reference) > 1e-2
    assert json.loads((distilled / "scheduler" / "scheduler_config.json").read_text())["shift"] == 5.0


def test_without_guidance_the_negative_prompt_is_not_encoded(tiny_wan):
    from pipedit.adapter import load_adapter
    from pipedit.runtime.rank import encode_request

    adapter = load_adapter(tiny_wan, parts={"text"})
    for guidance, encoded in ((1.0, False), (0.5, False), (1.01, True)):
        request = VideoRequest(PROMPT, **SHAPE, guidance_scale=guidance, negative_prompt="blurry, static")
        cond = encode_request(adapter, request)
        assert ("negative_prompt_embeds" in cond) is encoded, guidance
        assert len(adapter.cfg_branches(cond)) == (2 if encoded else 1)
