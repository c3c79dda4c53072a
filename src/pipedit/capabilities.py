"""What a model takes besides a prompt and a shape, and which parallel paths it runs: declared by
each adapter (a class attribute for the family, replaced per checkpoint where the checkpoint
decides, e.g. a Wan image-to-video pipeline), read by the engine, check_inputs and the options
route instead of probing the adapter for attributes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    negative_prompt: bool = False  # classifier-free guidance with a negative prompt
    image: bool = False  # image-to-video conditioning
    needs_image: bool = False  # image-to-video only: a request without an image is refused
    guidance_scale_2: bool = False  # two experts, the low-noise one with its own guidance scale
    # A scheduler with a flow-matching shift a request may set (pipedit.sampling.shift_parameter).
    flow_shift: bool = False
    # Ring attention (a head's sequence split over ranks); sparse layers that attend over a head's
    # whole sequence on one rank (OpenSoraPlan's Skiparse) cannot.
    ring: bool = True
    # Classifier-free guidance as separate conditional and unconditional passes (the adapter's
    # cfg_branches and predict_branches, pipedit.guidance.GuidedPrediction): what CFG parallel runs.
    cfg_parallel: bool = False
