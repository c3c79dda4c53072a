"""Step caching on several ranks equals the same cached run on one rank, and every rank (Aco
helpers included) skips the same steps.

One spawned 2-rank gloo world runs four layouts one after another with the real worker code
(cache_cases.LAYOUTS): HunyuanVideo on Ulysses 2 with fbcache, OpenSoraPlan (real CFG) on CFG
parallel with fbcache, and HunyuanVideo on Aco (1 denoise rank + 1 helper) with teacache; and,
sharing the world, OpenSoraPlan on CFG parallel without guidance (guidance_scale 0.5, uncached).
Thresholds come from the distances measured on these demo requests (see docs/caching.md): every
agreed distance lies at least 2% away from its threshold, so float rounding cannot flip a
decision, and each run both computes and skips some steps (asserted).

Tolerance 1e-4 relative to the latents' largest magnitude, the contract's bound: Ulysses only
moves data, but the sums behind each decision are added in another order, CFG parallel runs
each branch as a batch of one instead of two, and Aco's helpers run the same kernel on slices.
"""

import pytest
import torch
from cache_cases import HUNYUAN, LAYOUTS, agreement_world, layout_request, run_denoise

from pipedit.cache.policy import FirstBlockPolicy, relative_l1
from pipedit.cache.spec import CacheSpec
from pipedit.distributed.spawn import run_on_gloo_ranks

@pytest.fixture(scope="module")
def runs(demo_checkpoint, osp_demo):
    paths = {"hunyuan": str(demo_checkpoint), "osp": str(osp_demo)}
    ranks = run_on_gloo_ranks(agreement_world, 2, paths, timeout_s=400)
    single = {name: run_denoise(0, 1, paths[model], {}, layout_request(name, model), cache)
              for name, model, _, cache in LAYOUTS}
    return ranks, single


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("name", ["ulysses2", "cfg_parallel", "aco"])
def test_cached_parallel_run_equals_one_rank_and_skips_the_same_steps(runs, name):
    ranks, single = runs
    reference = single[name]
    assert True in reference["computed"] and False in reference["computed"]  # the cache really skips
    denoise = [r[name] for r in ranks if "latents" in r[name]]
    assert len(denoise) == (1 if name == "aco" else 2)
    for result in denoise:
        assert result["computed"] == reference["computed"]
        assert _relative(result["latents"], reference["latents"]) <= 1e-4
        assert result["report"] == reference["report"]


def test_cfg_parallel_without_guidance_equals_one_rank(runs):
    """guidance_scale 0.5 on OpenSoraPlan: each CFG group runs the conditional pass alone, as one
    rank does, and keeps its own prediction. Each group is a one-rank SP world running the same
    batch-1 forward, so the two ranks agree bit for bit; against the in-process rank, whose thread
    count differs, the contract's 1e-4 relative bound."""
    ranks, single = runs
    first, second = (r["cfg_unguided"] for r in ranks)
    assert torch.equal(first["latents"], second["latents"])
    assert _relative(first["latents"], single["cfg_unguided"]["latents"]) <= 1e-4
    assert first["cfg_branches"] == second["cfg_branches"] == single["cfg_unguided"]["cfg_branches"] == 1.0
    assert ranks[0]["cfg_parallel"]["cfg_branches"] == 2.0  # the guided request of the same world


def test_aco_helpers_skip_with_their_peers(runs):
    """TeaCache skips every block, so a skipped step's forward makes no attention call: the
    helper is told by the end-of-forward header and serves none; a computed step, all of them."""
    ranks, _ = runs
    denoise, helper = ranks[0]["aco"], ranks[1]["aco"]
    assert helper["served"] == [helper["calls"] if c else 0 for c in denoise["computed"]]


def test_rank_local_decisions_would_diverge(runs):
    """On Ulysses each rank's sums cover its sequence shard only. At the first measured step
    both ranks measure against the same reference, yet their local distances differ, and the
    agreed one (the single-device distance) lies between them; so a threshold between the two
    local distances makes one rank skip while the other computes (their collectives would no
    longer match). The agreed distance is the same number on both ranks, and it is not the max
    of the local ones (a max-agreement would take other decisions than one device)."""
    ranks, single = runs
    step = next(i for i, d in enumerate(single["ulysses2"]["distances"]) if d is not None)
    agreed = [r["ulysses2"]["distances"][step] for r in ranks]
    assert agreed[0] == agreed[1]
    local = [relative_l1(r["ulysses2"]["local_sums"][0]) for r in ranks]
    low, high = sorted(local)
    assert low < agreed[0] < high and high - low > 1e-3
    assert abs(agreed[0] - single["ulysses2"]["distances"][step]) <= 1e-5 * agreed[0]
    threshold = (agreed[0] + high) / 2
    policy = FirstBlockPolicy(CacheSpec("fbcache", threshold))
    local_decisions = {policy.decide(d, step, HUNYUAN["steps"]) for d in local}
    assert local_decisions == {True, False}
    assert max(local) != pytest.approx(agreed[0], rel=1e-3)


def test_the_decision_waits_at_the_latency_poll_interval(monkeypatch):
    """The agreement's host wait runs in the middle of every forward: it must poll at most
    LATENCY_POLL_S apart (as Aco's header waits), not back off to POLL_MAX_S. A CPU cannot time
    an NCCL poll, so this checks the argument the wait gets."""
    from pipedit.cache import agree
    from pipedit.distributed.deadline import LATENCY_POLL_S

    waits = []

    class Handle:
        def __init__(self, tensor):
            self.tensor = tensor

        def wait(self, **options):
            waits.append(options)
            return self.tensor * 2  # a group of two equal ranks

    monkeypatch.setattr(agree, "all_reduce_async", lambda tensor, group, op, state: Handle(tensor))
    assert agree.Agreement(["sp", "cfg"])(torch.tensor([1.0, 3.0])) == [4.0, 12.0]
    assert waits == [{"host": True, "max_sleep": LATENCY_POLL_S}] * 2
