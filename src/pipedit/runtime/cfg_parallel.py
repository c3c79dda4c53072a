"""CFG parallel: classifier-free guidance's branches on separate SP groups.

Each group runs the model's forward (with its own sequence parallelism) for its share of the
step's branches (the adapter's CFG seam: `branches_for`, `predict_branches`, `combine_predictions`):
branch i goes to group i mod the group count, so CFG's [negative, positive] put one pass on each
of 2 groups, and a model with more passes (LTX-2: negative, positive, STG, modality isolation)
gives each group every other one (4 passes: 2 per group; 3: 2 and 1, the lighter group's slot
padded with zeros). The ranks with the same sp rank all-gather their predictions every step and
combine them with the same code in branch order, so every denoise rank holds bit-identical noise
predictions and latents. A model without CFG branches is refused when the world is set up.

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
        if self.adapter.cfg_branches(cond) is None or not guidance_applies(guidance_scale):
            # One pass, no exchange: every group computes what one rank computes (see above).
            return self.adapter.predict_noise(latents, timestep, cond, guidance_scale)
        branches = self.adapter.branches_for(cond, guidance_scale)
        degree, group = self.ctx.cfg_degree, self.ctx.cfg_rank
        if len(branches) < degree:
            raise RuntimeError(f"the model gave {len(branches)} guidance branches for {degree} CFG groups")
        mine = self.adapter.predict_branches(latents, timestep, branches[group::degree])
        slots = -(-len(branches) // degree)
        mine += [torch.zeros_like(mine[0])] * (slots - len(mine))
        # Every group receives the predictions in the same order, so the combination is identical.
        gathered = all_gather_async(torch.stack(mine).contiguous(), self.ctx.cfg_group, self.ctx.state).wait()
        preds = [gathered[i % degree][i // degree] for i in range(len(branches))]
        return self.adapter.combine_predictions(preds, latents, timestep, branches, guidance_scale)
