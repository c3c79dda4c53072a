"""CFG parallel: classifier-free guidance's branches on separate SP groups.

Each group runs the model's forward (with its own sequence parallelism) for one branch of the
adapter's CFG seam (`cfg_branches`, `predict_branches`, `combine_guidance`); the ranks with the
same sp rank all-gather their branch predictions every step and combine them with the same
code in the same order, so every denoise rank holds bit-identical noise predictions and
latents. A model without CFG branches is refused when the world is set up.

A step without guidance (guidance_scale <= 1, pipedit.guidance.guidance_applies: the request's,
or Wan2.2's low-noise expert's guidance_scale_2 of 1) has one branch, the conditional one. Every
group then runs that one pass itself, exactly as one rank runs it (the adapter's predict_noise),
and keeps its own prediction: nothing is exchanged, the second group's pass duplicates the
first's (same inputs, same code) and adds no time to the step. The groups' latents stay equal
as long as their kernels are deterministic; the first group's (rank 0's) are the result either
way. Splitting the one pass over both groups instead would need another sequence-parallel
degree, i.e. other communicators.
"""

from __future__ import annotations

import torch

from ..distributed.collectives import all_gather_async
from ..distributed.context import ParallelContext
from ..errors import UserInputError
from ..guidance import guidance_applies


def check_cfg_capable(adapter) -> None:
    """`adapter`: an adapter or its class (the engine asks before any weights load); refused
    unless its capabilities say it has the seam (cfg_parallel)."""
    if not adapter.capabilities.cfg_parallel:
        family = getattr(adapter, "family", type(adapter).__name__)
        raise UserInputError(
            f"--cfg-parallel needs a model that runs classifier-free guidance as separate conditional and "
            f"unconditional passes; {family} has no CFG branches (cfg_branches, predict_branches). "
            f"Drop --cfg-parallel for this model"
        )


class CfgParallelPredictor:
    """predict_noise for one CFG group: this group's branch, then the exchange."""

    def __init__(self, adapter, ctx: ParallelContext) -> None:
        check_cfg_capable(adapter)
        self.adapter = adapter
        self.ctx = ctx

    def __call__(self, latents: torch.Tensor, timestep: torch.Tensor, cond: dict[str, torch.Tensor],
                 guidance_scale: float) -> torch.Tensor:
        branches = self.adapter.cfg_branches(cond)
        if branches is None or not guidance_applies(guidance_scale):
            # One pass, no exchange: every group computes what one rank computes (see above).
            return self.adapter.predict_noise(latents, timestep, cond, guidance_scale)
        if len(branches) != self.ctx.cfg_degree:
            raise RuntimeError(f"the model gave {len(branches)} CFG branches for {self.ctx.cfg_degree} CFG groups")
        mine = self.adapter.predict_branches(latents, timestep, [branches[self.ctx.cfg_rank]])[0]
        # Every group receives the predictions in branch order, so the combination is identical.
        preds = all_gather_async(mine.contiguous(), self.ctx.cfg_group, self.ctx.state).wait()
        return self.adapter.combine_guidance(preds, guidance_scale)
