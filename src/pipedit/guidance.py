"""Classifier-free guidance as the models with a negative branch run it (OpenSoraPlan, Wan):
whether a step runs it, which branches it needs and how their predictions combine. Shared by
the adapters' CFG seam (`branches_for`, `combine_guidance`, through GuidedPrediction), by the
text rank (a request without guidance encodes no negative prompt) and so by CFG parallel, which
calls the adapter's."""

from __future__ import annotations

import torch


def guidance_applies(guidance_scale: float) -> bool:
    """Whether a step with this scale runs classifier-free guidance: guidance_scale > 1, as
    WanPipeline and Open-Sora-Plan's pipeline decide (`do_classifier_free_guidance`). At or below
    1 only the conditional prediction is used, and the negative prompt is not even encoded."""
    return guidance_scale > 1


def guided_branches(branches: list, guidance_scale: float) -> list:
    """[negative, positive] -> both when guidance applies, else the positive one only. A request
    encoded without guidance has only [positive]."""
    if not guidance_applies(guidance_scale):
        return branches[-1:]
    if len(branches) != 2:
        raise RuntimeError(f"guidance_scale {guidance_scale} needs the negative branch, but the condition was "
                           f"encoded without it (a request whose guidance_scale is at most 1)")
    return branches


def branch_passes(adapter, cond: dict, guidance_scale: float) -> int:
    """Forward passes a step of this scale runs over the request's branches: 2 with guidance, 1
    without (LTX-2: up to 4, its adapter's branches_for), and 1 for a model without CFG branches
    (one pass, e.g. embedded guidance)."""
    branches = adapter.cfg_branches(cond)
    return 1 if branches is None else len(adapter.branches_for(cond, guidance_scale))


def combine_guidance(preds: list[torch.Tensor], guidance_scale: float) -> torch.Tensor:
    """[uncond, cond] -> uncond + g * (cond - uncond), in the predictions' dtype; a single
    prediction passes through."""
    if len(preds) == 1:
        return preds[0]
    uncond, cond = preds
    return uncond + guidance_scale * (cond - uncond)


class GuidedPrediction:
    """The CFG seam's shared half, for an adapter that defines `cfg_branches(cond)` ([negative,
    positive] conditions; [positive] when encoded without guidance) and `predict_branches(latents,
    timestep, branches)` (one prediction per branch): the branches a step runs, their combination,
    and predict_noise on one rank. Listed before pipedit.model_hooks.AdapterHooks among an
    adapter's bases, it overrides those defaults. A model whose guidance runs more passes (LTX-2:
    STG and modality isolation besides CFG) overrides branches_for and combine_predictions."""

    combine_guidance = staticmethod(combine_guidance)

    def branches_for(self, cond: dict, guidance_scale: float) -> list:
        """Both branches when guidance applies (guidance_scale > 1), else the positive one only."""
        return guided_branches(self.cfg_branches(cond), guidance_scale)

    def combine_predictions(self, preds: list[torch.Tensor], latents: torch.Tensor, timestep: torch.Tensor,
                            branches: list, guidance_scale: float) -> torch.Tensor:
        """The step's guided prediction from the predictions of `branches` (branches_for's, in its
        order) at these latents and timestep; default: combine_guidance (CFG on the predictions)."""
        return self.combine_guidance(preds, guidance_scale)

    def predict_noise(self, latents: torch.Tensor, timestep: torch.Tensor, cond: dict,
                      guidance_scale: float) -> torch.Tensor:
        branches = self.branches_for(cond, guidance_scale)
        preds = self.predict_branches(latents, timestep, branches)
        return self.combine_predictions(preds, latents, timestep, branches, guidance_scale)
