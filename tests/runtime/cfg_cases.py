"""Worker for the CFG-parallel unit test (a module, so that spawned ranks can import it)."""

import torch

from pipedit.capabilities import Capabilities
from pipedit.distributed.context import ParallelContext
from pipedit.guidance import GuidedPrediction
from pipedit.model_hooks import AdapterHooks
from pipedit.runtime.cfg_parallel import CfgParallelPredictor

# Guidance scales run in one world: with guidance, and the two without (at 1 the combination
# would give the conditional prediction up to rounding, at 0.5 something else entirely).
SCALES = (7.5, 1.0, 0.5)


class ToyCfgAdapter(GuidedPrediction, AdapterHooks):
    """The CFG seam of a model whose branches differ by their text condition; one rank runs it as
    the real adapters do (GuidedPrediction: both branches only when guidance_scale > 1)."""

    family = "toy"
    capabilities = Capabilities(cfg_parallel=True)

    def __init__(self):
        self.passes = []  # the branch count of every predict_branches call

    def cfg_branches(self, cond):
        keys = ("negative", "positive") if "negative" in cond else ("positive",)  # encoded without guidance
        return [{"text": cond[key]} for key in keys]

    def predict_branches(self, latents, timestep, branches):
        self.passes.append(len(branches))
        return [torch.sin(latents * b["text"] + timestep) for b in branches]


def cfg_worker(rank, world_size, ulysses):
    ctx = ParallelContext.create(ulysses, 1, cfg_degree=2)
    adapter, one_rank = ToyCfgAdapter(), ToyCfgAdapter()
    predictor = CfgParallelPredictor(adapter, ctx)
    latents = torch.randn(1, 4, 3, 2, 2, generator=torch.Generator().manual_seed(3))
    cond = {"negative": torch.tensor(0.5), "positive": torch.tensor(1.5)}
    timestep = torch.tensor(0.25)
    runs = {}
    for scale in SCALES:
        got = predictor(latents, timestep, cond, scale)
        runs[scale] = {"equal": torch.equal(got, one_rank.predict_noise(latents, timestep, cond, scale)), "pred": got}
    # A request without guidance is encoded without its negative branch.
    unguided = predictor(latents, timestep, {"positive": cond["positive"]}, 1.0)
    return {"cfg_rank": ctx.cfg_rank, "sp_rank": ctx.rank, "sp_world": ctx.world_size, "runs": runs,
            "unguided_equal": torch.equal(unguided, runs[1.0]["pred"]), "passes": adapter.passes,
            "conditional": torch.sin(latents * cond["positive"] + timestep),
            "unconditional": torch.sin(latents * cond["negative"] + timestep)}
