"""One video's decode split over N decode ranks (pipedit.runtime.split_decode): time and memory.

Time: the slowest rank's share of the single-rank decode, plus the latents' broadcast and the
gather of the other ranks' decoded pieces to the lead (bfloat16 frames). How a decode splits into
units, what share the slowest rank decodes and what a rank holds is the family's form (its
pipedit.families entry's planner.decode_split: an Unsplit or a subclass in its planner module).
"""

from __future__ import annotations

import math

from .. import families
from .cost import Shape
from .models import ModelSpec

FRAME_BYTES = 2  # decoded pieces travel in the VAE's bfloat16


class Unsplit:
    """One piece (Wan's causal decode runs its frame chunks in order on one rank: its adapter has
    no split); a rank's peak is the single-rank decode's."""

    def units(self, model: ModelSpec, shape: Shape, tiled: bool) -> int:
        return 1

    def slowest_share(self, count: int, ranks: int) -> float:
        return math.ceil(count / ranks) / count

    def rank_bytes(self, unit_peak: float, model: ModelSpec, shape: Shape, tiled: bool, ranks: int,
                   lead: bool) -> float:
        return unit_peak


UNSPLIT = Unsplit()


def _form(model: ModelSpec) -> Unsplit:
    return families.load(families.family(model.family).planner.decode_split)


def units(model: ModelSpec, shape: Shape, tiled: bool) -> int:
    """How many pieces the decode has (1: nothing to split)."""
    return _form(model).units(model, shape, tiled)


def slowest_share(model: ModelSpec, shape: Shape, tiled: bool, ranks: int) -> float:
    """The fraction of the single-rank decode the busiest of `ranks` ranks computes."""
    return _form(model).slowest_share(units(model, shape, tiled), ranks)


def output_bytes(model: ModelSpec, shape: Shape) -> float:
    return 3 * shape.frames * shape.height * shape.width * FRAME_BYTES


def gather_bytes(model: ModelSpec, shape: Shape, ranks: int) -> float:
    """What the lead receives: every other rank's share of the decoded video."""
    return output_bytes(model, shape) * (ranks - 1) / ranks


def split_seconds(single_s: float, model: ModelSpec, shape: Shape, node, tiled: bool, ranks: int) -> float:
    lt, lh, lw = model.latent_shape(shape.height, shape.width, shape.frames)
    latents = model.latent_channels * lt * lh * lw * 4
    comm = node.transfer_s(latents, ranks) + node.transfer_s(gather_bytes(model, shape, ranks), 2)
    return single_s * slowest_share(model, shape, tiled, ranks) + comm


def split_rank_bytes(unit_peak: float, model: ModelSpec, shape: Shape, tiled: bool, ranks: int,
                     lead: bool) -> float:
    """Decode activations of one rank of a split; `unit_peak` is the single-rank decode's peak
    (memory.vae_decode_peak_bytes)."""
    return _form(model).rank_bytes(unit_peak, model, shape, tiled, ranks, lead)
