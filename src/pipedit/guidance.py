"""Classifier-free guidance as the models with a negative branch run it (OpenSoraPlan, Wan):
which branches a step needs and how their predictions combine. Shared by the adapters' CFG seam
(`branches_for`, `combine_guidance`, through GuidedPrediction) and so by CFG parallel, which calls
the adapter's."""

from __future__ import annotations

import torch


def guided_branches(branches: list, guidance_scale: float) -> list:
    """[negative, positive] -> both when guidance applies (guidance_scale > 1, as the reference
    pipelines decide), else the positive one only."""
    return branches if guidance_scale > 1 else branches[1:]


def combine_guidance(preds: list[torch.Tensor], guidance_scale: float) -> torch.Tensor:
    """[uncond, cond] -> uncond + g * (cond - uncond), in the predictions' dtype; a single
    prediction passes through."""
    if len(preds) == 1:
        return preds[0]
    uncond, cond = preds
    return uncond + guidance_scale * (cond - uncond)


class GuidedPrediction:
    """The CFG seam's shared half, for an adapter that defines `cfg_branches(cond)` ([negative,
    positive] conditions) and `predict_branches(latents, timestep, branches)` (one prediction per
    branch): the branches a step runs, their combination, and predict_noise on one rank. Listed
    before pipedit.model_hooks.AdapterHooks among an adapter's bases, it overrides those defaults."""

    combine_guidance = staticmethod(combine_guidance)

    def branches_for(self, cond: dict, guidance_scale: float) -> list:
        """Both branches when guidance applies (guidance_scale > 1), else the positive one only."""
        return guided_branches(self.cfg_branches(cond), guidance_scale)

    def predict_noise(self, latents: torch.Tensor, timestep: torch.Tensor, cond: dict,
                      guidance_scale: float) -> torch.Tensor:
        preds = self.predict_branches(latents, timestep, self.branches_for(cond, guidance_scale))
        return combine_guidance(preds, guidance_scale)
