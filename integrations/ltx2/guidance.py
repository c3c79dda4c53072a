"""LTX-2's guidance, as LTX2Pipeline composes it (diffusers 0.42.1), one step at a time.

A guided step runs up to four transformer passes over the same latents, each a *branch*:
- "negative" and "positive": classifier-free guidance (the negative prompt, "" by default);
- "stg": spatio-temporal guidance, the positive prompt with the self-attention of the STG blocks
  replaced by its values (LTX2PerturbedAttnProcessor's shortcut);
- "isolated": modality-isolation guidance, the positive prompt with the audio-to-video and
  video-to-audio cross-attention of every block turned off.
Each prediction is turned into x0 (x - sigma * v), each guidance term is a difference of x0s scaled
on its own per stream (video and audio scales), the sum is rescaled towards the positive x0's
standard deviation (guidance_rescale), and the result is turned back into a velocity.

pipedit's request has one guidance_scale: above 1 it is the video's CFG scale and the other terms
take LTX2Pipeline's defaults (audio CFG 7, STG 1 on block 28, modality 3, rescale 0.7); at or
below 1 (the distilled checkpoints) every term is off and a step is one positive pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BRANCHES = ("negative", "positive", "stg", "isolated")
STG_BLOCK = 28  # LTX2Pipeline's spatio_temporal_guidance_blocks default (of 48 blocks)


@dataclass(frozen=True)
class Scales:
    """One stream's guidance scales (LTX2Pipeline's names)."""

    cfg: float
    stg: float
    modality: float
    rescale: float


@dataclass(frozen=True)
class Guidance:
    video: Scales
    audio: Scales
    stg_blocks: tuple[int, ...]

    @classmethod
    def for_scale(cls, guidance_scale: float, num_blocks: int) -> Guidance:
        if guidance_scale <= 1:
            off = Scales(cfg=1.0, stg=0.0, modality=1.0, rescale=0.0)
            return cls(off, off, ())
        return cls(Scales(guidance_scale, 1.0, 3.0, 0.7), Scales(7.0, 1.0, 3.0, 0.7), stg_blocks(num_blocks))

    def branches(self) -> tuple[str, ...]:
        """The passes a step runs, in BRANCHES order (combine reads them by name)."""
        both = (self.video, self.audio)
        kinds = []
        if any(s.cfg > 1 for s in both):
            kinds += ["negative", "positive"]
        else:
            kinds.append("positive")
        if any(s.stg > 0 for s in both):
            kinds.append("stg")
        if any(s.modality > 1 for s in both):
            kinds.append("isolated")
        return tuple(kinds)


def stg_blocks(num_blocks: int) -> tuple[int, ...]:
    """The blocks STG perturbs: the pipeline's default block 28 of the released 48; a model with
    fewer blocks perturbs its middle one."""
    return (STG_BLOCK if num_blocks > STG_BLOCK else num_blocks // 2,)


def rescale(guided: torch.Tensor, positive: torch.Tensor, factor: float) -> torch.Tensor:
    """Guidance rescale (Lin et al.): the guided x0 pulled towards the positive x0's std."""
    dims = list(range(1, positive.ndim))
    ratio = positive.std(dim=dims, keepdim=True) / guided.std(dim=dims, keepdim=True)
    return factor * (guided * ratio) + (1 - factor) * guided


def combine_stream(preds: dict[str, torch.Tensor], sample: torch.Tensor, sigma: torch.Tensor,
                   scales: Scales) -> torch.Tensor:
    """One stream's guided velocity from its branches' velocities (tokens, float32)."""
    x0 = {kind: sample - v * sigma for kind, v in preds.items()}
    positive = x0["positive"]
    guided = positive
    if "negative" in x0:
        guided = guided + (scales.cfg - 1) * (positive - x0["negative"])
    if "stg" in x0:
        guided = guided + scales.stg * (positive - x0["stg"])
    if "isolated" in x0:
        guided = guided + (scales.modality - 1) * (positive - x0["isolated"])
    if scales.rescale > 0:
        guided = rescale(guided, positive, scales.rescale)
    return (sample - guided) / sigma
