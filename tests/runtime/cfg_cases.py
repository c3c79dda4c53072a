"""Worker for the CFG-parallel unit test (a module, so that spawned ranks can import it)."""

import torch

from pipedit.capabilities import Capabilities
from pipedit.distributed.context import ParallelContext
from pipedit.model_hooks import AdapterHooks
from pipedit.runtime.cfg_parallel import CfgParallelPredictor


class ToyCfgAdapter(AdapterHooks):
    """The CFG seam of a model whose branches differ by their text condition."""

    family = "toy"
    capabilities = Capabilities(cfg_parallel=True)

    def cfg_branches(self, cond):
        return [{"text": cond["negative"]}, {"text": cond["positive"]}]

    def predict_branches(self, latents, timestep, branches):
        return [torch.sin(latents * b["text"] + timestep) for b in branches]

    def combine_guidance(self, preds, guidance_scale):
        uncond, text = preds
        return uncond + guidance_scale * (text - uncond)

    def predict_noise(self, latents, timestep, cond, guidance_scale):
        return self.combine_guidance(self.predict_branches(latents, timestep, self.cfg_branches(cond)), guidance_scale)


def cfg_worker(rank, world_size, ulysses):
    ctx = ParallelContext.create(ulysses, 1, cfg_degree=2)
    adapter = ToyCfgAdapter()
    latents = torch.randn(1, 4, 3, 2, 2, generator=torch.Generator().manual_seed(3))
    cond = {"negative": torch.tensor(0.5), "positive": torch.tensor(1.5)}
    timestep = torch.tensor(0.25)
    got = CfgParallelPredictor(adapter, ctx)(latents, timestep, cond, 7.5)
    expected = adapter.predict_noise(latents, timestep, cond, 7.5)
    return {"cfg_rank": ctx.cfg_rank, "sp_rank": ctx.rank, "sp_world": ctx.world_size,
            "equal": torch.equal(got, expected), "pred": got}
