"""End to end on the demo model: sequence-parallel runs (Ray actors, gloo) against one device.

80x112x17 gives 5x5x7 = 175 video tokens: uneven on 2 and on 3 ranks. The demo model has 4
heads, so --ulysses 3 splits heads unevenly (2, 1, 1). Ulysses only moves data, so its results
should be bit-identical; ring merges blocks with an online softmax, so it differs by float
rounding. 1e-4 is the contract's bound for final latents.
"""

import pytest

from e2e_helpers import Case, generated_latents
from e2e_helpers import single_device_latents as reference_latents
from pipedit.cli import main
from reference_cache import cached

pytestmark = pytest.mark.slow  # rank groups on Ray, end to end
PROMPT = "a lighthouse at dusk"
CASE = Case(PROMPT, height=80, width=112, frames=17, steps=2, seed=5)


@pytest.fixture(scope="module")
def single_device_latents(demo_checkpoint):
    return reference_latents(demo_checkpoint, CASE)


# Synchronous Ulysses 2 runs in the adapter test below (against diffusers with the adapter).
@pytest.mark.parametrize(
    "flags",
    [["--ring", "2"], ["--ulysses", "2", "--pipesp-chunk", "1"], ["--ulysses", "3"],
     ["--ulysses", "2", "--pipesp-chunk", "auto"]],
    ids=lambda flags: " ".join(flags),
)
def test_parallel_latents_equal_single_device(ray_session, demo_checkpoint, single_device_latents, tmp_path, flags):
    latents = generated_latents(demo_checkpoint, tmp_path, CASE, flags)
    assert latents.shape == single_device_latents.shape
    assert (latents - single_device_latents).abs().max().item() <= 1e-4


def test_request_error_from_a_worker_stays_a_user_error(ray_session, demo_checkpoint, tmp_path, capsys):
    code = main([
        "generate", "--prompt", PROMPT, "--model-path", str(demo_checkpoint), "--height", "100",
        "--output", str(tmp_path / "out.mp4"), "--ulysses", "2",
    ])
    assert code == 2
    assert "multiples of 16" in capsys.readouterr().err


def test_lora_adapter_under_ulysses_equals_diffusers(ray_session, demo_checkpoint, tmp_path_factory, tmp_path):
    """HunyuanVideo's original-form adapter at scale 0.8 injected on each rank before the shard
    plan, against HunyuanVideoPipeline.load_lora_weights + set_adapters (tests/lora: one rank)."""
    import torch
    from diffusers import HunyuanVideoPipeline

    from lora_files import with_adapters, write_hunyuan_adapter

    adapter = write_hunyuan_adapter(demo_checkpoint, tmp_path_factory.mktemp("lora"))
    pipe = cached(with_adapters(HunyuanVideoPipeline.from_pretrained(demo_checkpoint), [adapter], [0.8]), demo_checkpoint)
    reference = pipe(prompt=CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames,
                     num_inference_steps=CASE.steps, generator=torch.Generator("cpu").manual_seed(CASE.seed),
                     output_type="latent").frames
    latents = generated_latents(demo_checkpoint, tmp_path, CASE, ["--ulysses", "2", "--lora", f"{adapter}:0.8"])
    assert (latents - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()
