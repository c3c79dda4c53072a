"""End to end on tiny Wan checkpoints: pipedit's parallel runs (Ray actors, gloo) against
diffusers' pipelines on one device (output_type="latent", the same seed and CPU generator,
guidance 5 with the empty negative prompt): Wan2.1 text-to-video against WanPipeline; Wan2.1
image-to-video (CLIP image tokens) and Wan2.2 I2V A14B (two experts, guidance_scale_2) against
WanImageToVideoPipeline, the first under Ulysses + DeDiVAE + Aco, the second under CFG parallel +
DeDiVAE (the decode rank holds the text encoder, so it encodes the image too). The A14B case runs
guidance_scale_2 1: its high-noise step exchanges and combines both branches, its two low-noise
steps have no guidance and run the conditional pass alone on each CFG group, where WanPipeline
computes uncond + 1 x (cond - uncond) (the same up to rounding).

The transformer has 3 heads (2 ranks split them 2+1); 48x80x9 gives 3x3x5 = 45 video tokens
(uneven shards). Ulysses and Aco only move data; CFG parallel runs each branch as its own batch-1
forward as WanPipeline does, while one rank batches both branches: matmul rounding may differ by
~1e-7 per forward, which guidance (x5) and UniPC's multistep updates carry to the final latents.
The bound is the contract's relative one: max|diff| <= 1e-4 x max|WanPipeline latents|.
"""

import pytest
import torch

from e2e_helpers import Case, generated_latents
from reference_cache import cached

CASE = Case("a red kite over the dunes", height=48, width=80, frames=9, steps=3, seed=11)
GUIDANCE = 5.0


@pytest.fixture(scope="module")
def checkpoint(wan_three_heads):
    return wan_three_heads


# Ring and USP: the transformer-level test (tests/integrations/wan/test_wan_parallel.py, USP 2x2).
# Text-to-video without adapters under Ulysses 2 + a decode rank: the "none" request of the
# per-request adapter test below, against WanPipeline; CFG parallel, DeDiVAE and Aco run the
# text-to-video path inside the image-to-video cases and the adapter cases too.
IMAGE_CASES = [("i2v", ["--decode-ranks", "1", "--aco", "on", "--ulysses", "2"]),
               ("i2v-a14b", ["--cfg-parallel", "--decode-ranks", "1"])]


CACHED = Case(CASE.prompt, height=48, width=80, frames=9, steps=8, seed=11)


@pytest.mark.slow
def test_cached_ulysses_run_equals_the_cached_one_rank_run(ray_session, checkpoint, tmp_path):
    """fbcache:0.1 on Ulysses 2 (the first block's input cut by the shard plan's pre-hook before
    the cache sees it; decisions agreed over both ranks) against the same cache on one rank. On
    this request the one-rank distances are 0.072, 0.081, 0.104, 0.063, 0.095, 0.090, 0.144: the
    nearest sits 3.8% from the threshold, far beyond float reordering, and steps are both skipped
    and computed. A flipped decision moves the latents by ~1e-2, so the 1e-4 bound catches it."""
    from pipedit.config import EngineConfig, ModelConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime.engine import Engine

    request = VideoRequest(CACHED.prompt, height=CACHED.height, width=CACHED.width, num_frames=CACHED.frames,
                           steps=CACHED.steps, seed=CACHED.seed, guidance_scale=GUIDANCE, cache="fbcache:0.1")
    with Engine(EngineConfig(model=ModelConfig(path=str(checkpoint)))) as engine:
        one_rank = engine.generate(request)
    assert 0 < one_rank.timings["cache_skipped"] < CACHED.steps
    latents = generated_latents(checkpoint, tmp_path, CACHED, ["--ulysses", "2", "--cache", "fbcache:0.1",
                                                               "--guidance-scale", str(GUIDANCE)])
    scale = one_rank.latents.abs().max().item()
    assert (latents - one_rank.latents).abs().max().item() <= 1e-4 * scale


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    import numpy as np
    from PIL import Image

    path = tmp_path_factory.mktemp("image") / "start.png"  # another size and aspect than the video
    Image.fromarray((np.random.RandomState(2).rand(37, 71, 3) * 255).astype("uint8")).save(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("preset,flags", IMAGE_CASES, ids=lambda case: case if isinstance(case, str) else " ".join(case))
def test_image_to_video_parallel_latents_equal_diffusers(ray_session, image_file, tmp_path_factory, tmp_path, preset,
                                                         flags):
    from diffusers import WanImageToVideoPipeline

    from pipedit.images import load_image
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    dims = WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=4)
    checkpoint = write_demo_checkpoint(tmp_path_factory.mktemp(preset) / "tiny", dims, preset=preset)
    # A14B (boundary 900): step 999 on transformer, 857 and 600 on transformer_2 with its own scale,
    # 1: no guidance on those two steps.
    scale_2 = ["--guidance-scale-2", "1"] if preset == "i2v-a14b" else []
    latents = generated_latents(checkpoint, tmp_path, CASE, [*flags, "--guidance-scale", str(GUIDANCE),
                                                             "--image", str(image_file), *scale_2])
    pipe = cached(WanImageToVideoPipeline.from_pretrained(checkpoint), checkpoint)
    pipe.set_progress_bar_config(disable=True)
    reference = pipe(image=load_image(image_file.read_bytes()), prompt=CASE.prompt, height=CASE.height,
                     width=CASE.width, num_frames=CASE.frames, num_inference_steps=CASE.steps,
                     guidance_scale=GUIDANCE, guidance_scale_2=1.0 if scale_2 else None, output_type="latent",
                     generator=torch.Generator("cpu").manual_seed(CASE.seed)).frames
    scale = reference.abs().max().item()
    assert latents.shape == reference.shape and scale > 0.1
    assert (latents - reference).abs().max().item() <= 1e-4 * scale


@pytest.fixture(scope="module")
def adapters(wan_three_heads_adapters):
    return wan_three_heads_adapters


# Ulysses + DeDiVAE + Aco: the Aco helper computes attention from q/k/v it is sent and holds no
# adapter; CFG parallel: each group runs its branch with the adapters (one rank: tests/lora).
LORA_LAYOUTS = [["--ulysses", "2", "--decode-ranks", "1", "--aco", "on"], ["--cfg-parallel"]]


@pytest.mark.slow
@pytest.mark.parametrize("flags", LORA_LAYOUTS, ids=lambda flags: " ".join(flags))
def test_two_lora_adapters_on_parallel_layouts_equal_diffusers(ray_session, checkpoint, adapters, tmp_path, flags):
    """Two adapters (diffusers/PEFT form on proj_out among others, which the shard plan gathers;
    Wan's original form with diff_b) at scales 0.7 and 1.3, injected on each rank before the plan,
    against WanPipeline.load_lora_weights + set_adapters on one device."""
    from diffusers import WanPipeline

    from lora_files import with_adapters

    pipe = cached(with_adapters(WanPipeline.from_pretrained(checkpoint), adapters, [0.7, 1.3]), checkpoint)
    reference = pipe(prompt=CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames,
                     num_inference_steps=CASE.steps, guidance_scale=GUIDANCE, output_type="latent",
                     generator=torch.Generator("cpu").manual_seed(CASE.seed)).frames
    latents = generated_latents(checkpoint, tmp_path, CASE, [*flags, "--guidance-scale", str(GUIDANCE),
                                                             "--lora", f"{adapters[0]}:0.7", "--lora", f"{adapters[1]}:1.3"])
    scale = reference.abs().max().item()
    assert (latents - reference).abs().max().item() <= 1e-4 * scale


@pytest.mark.slow
def test_per_request_adapters_switch_in_lockstep_under_ulysses_and_dedivae(ray_session, checkpoint, adapters):
    """Named adapters (model.offered_loras) on Ulysses 2 + a decode rank: requests alternating A (both
    adapters), none, B, A, each against WanPipeline with that request's own adapters. Both denoise
    ranks take the set from the request they begin; the decode rank decodes request k while k+1
    denoises with another set."""
    from diffusers import WanPipeline

    from lora_files import with_adapters
    from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime.engine import Engine

    def reference(chosen, scales):
        pipe = cached(with_adapters(WanPipeline.from_pretrained(checkpoint), chosen, scales), checkpoint)
        return pipe(prompt=CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames,
                    num_inference_steps=CASE.steps, guidance_scale=GUIDANCE, output_type="latent",
                    generator=torch.Generator("cpu").manual_seed(CASE.seed)).frames

    def request(*loras):
        return VideoRequest(CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames,
                            steps=CASE.steps, seed=CASE.seed, guidance_scale=GUIDANCE, loras=loras)

    a = ("style", 0.7), ("distill", 1.3)
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), offered_loras={"style": str(adapters[0]),
                                                                          "distill": str(adapters[1])}),
                          parallel=ParallelConfig(ulysses=2, decode_ranks=1))
    with Engine(config) as engine:
        results = list(engine.generate_many([request(*a), request(), request(("distill", 0.6)), request(*a)]))
    both = reference(adapters, [0.7, 1.3])
    expected = [both, reference((), ()), reference(adapters[1:], [0.6]), both]
    for result, latents in zip(results, expected):
        assert (result.latents - latents).abs().max().item() <= 1e-4 * latents.abs().max().item()
