"""The step cache on one rank: off means untouched, fbcache means diffusers' First-Block Cache.

Threshold 0 never skips, and a computed step returns the blocks' own outputs, so results are
bit-identical (torch.equal) to the uncached run in the same process. Against diffusers'
FirstBlockCacheConfig on the same fp32 modules the decisions must be identical and the latents
equal within 1e-4 relative (the contract's bound; the distances are sums instead of means and
pipedit's loop is its own, so the last bits may differ). fbcache:0.4 sits >= 2% away from every
distance measured on this request, so rounding cannot flip a decision."""

import pytest
import torch
from cache_cases import HUNYUAN, OSP, SMALL_HUNYUAN, run_single

from pipedit.adapter import load_adapter
from pipedit.cache.session import WorkerCache
from pipedit.errors import InvalidRequestError


def test_threshold_zero_equals_uncached_exactly_and_caches_are_per_request(demo_checkpoint):
    """The engine's default here is fbcache:0.4: a request without a cache takes it (and skips),
    a request's own cache wins, and a request after a skipping one starts clean."""
    small = SMALL_HUNYUAN
    uncached, fb0, by_default, tea0, uncached_after = run_single(
        str(demo_checkpoint), [(small, "none"), (small, "fbcache:0"), (HUNYUAN, None), (small, "teacache:0"),
                               (small, "none")], default="fbcache:0.4")
    for result in (fb0, tea0):
        assert all(result["computed"]) and torch.equal(result["latents"], uncached["latents"])
    assert False in by_default["computed"]
    assert torch.equal(uncached_after["latents"], uncached["latents"]) and uncached_after["computed"] is None
    assert by_default["report"] == {"cache_computed": by_default["computed"].count(True),
                                    "cache_skipped": by_default["computed"].count(False)}


def test_opensora_plan_threshold_zero_and_teacache_refused(osp_demo):
    small = dict(OSP, steps=3)
    uncached, fb0 = run_single(str(osp_demo), [(small, "none"), (small, "fbcache:0")])
    assert torch.equal(fb0["latents"], uncached["latents"])
    adapter = load_adapter(str(osp_demo), parts={"dit"})
    with pytest.raises(InvalidRequestError, match="families that have them: hunyuan-video"):
        WorkerCache(adapter).new_state("teacache:0.1", "none", 3)


def test_fbcache_takes_diffusers_decisions(demo_checkpoint, diffusers_pipeline):
    from diffusers.hooks import FirstBlockCacheConfig
    from diffusers.hooks import first_block_cache as fbc

    decisions, original = [], fbc.FBCHeadBlockHook._should_compute_remaining_blocks

    def recording(hook, residual):
        decisions.append(original(hook, residual))
        return decisions[-1]

    pipe = diffusers_pipeline
    pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=0.4))
    fbc.FBCHeadBlockHook._should_compute_remaining_blocks = recording
    try:
        reference = pipe(prompt=HUNYUAN["prompt"], height=HUNYUAN["height"], width=HUNYUAN["width"],
                         num_frames=HUNYUAN["num_frames"], num_inference_steps=HUNYUAN["steps"],
                         generator=torch.Generator("cpu").manual_seed(HUNYUAN["seed"]), output_type="latent").frames
    finally:
        fbc.FBCHeadBlockHook._should_compute_remaining_blocks = original
        pipe.transformer.disable_cache()
    (ours,) = run_single(str(demo_checkpoint), [(HUNYUAN, "fbcache:0.4")])
    assert ours["computed"] == decisions and False in decisions and True in decisions[1:]
    assert ((ours["latents"] - reference).abs().max() / reference.abs().max()).item() <= 1e-4


def test_hook_keeps_names_and_weights_and_comes_off(osp_demo):
    """Installed from outside: state_dict keys unchanged, no request running means the model's own
    forward (bit for bit), and removal restores each block's forward as it was."""
    from pipedit.integrations.opensora_plan.cache_blocks import cache_blocks

    from pipedit.cache.hook import StepCache

    transformer = load_adapter(str(osp_demo), parts={"dit"}).transformer
    keys = list(transformer.state_dict())
    x = torch.randn(1, transformer.config.in_channels, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    args = (x, torch.tensor([500.0]), torch.randn(1, 4, transformer.config.caption_channels))
    before = transformer(*args)
    hook = StepCache(cache_blocks(transformer), agree=lambda sums: sums.tolist())
    assert list(transformer.state_dict()) == keys
    assert all("forward" in vars(block) for block in transformer.transformer_blocks)
    assert torch.equal(transformer(*args), before)
    hook.remove()
    assert not any("forward" in vars(block) for block in transformer.transformer_blocks)
