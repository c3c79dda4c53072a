"""One video's decode split over N decode ranks (pipedit.runtime.split_decode): time and memory.

Time: the slowest rank's share of the single-rank decode, plus the latents' broadcast and the
gather of the other ranks' decoded pieces to the lead (bfloat16 frames).
- HunyuanVideo: units are diffusers' temporal passes x spatial tiles (tiled), handed out whole:
  the slowest rank decodes ceil(units / N) of them (a 129-frame video has 11 passes: 3 of 11 on 4
  ranks, 0.27 of the time, not 0.25).
- WFVAE: the head (conv_in + mid block, ~1-2% of the FLOPs) runs on every rank; the tail on a
  band of h/N latent rows plus a halo on each inner side: (h/N + 2 halo) / h of the rows.

Memory per rank: HunyuanVideo's units are decoded one at a time on one rank too, so a rank's peak
is the single-rank peak (only the held outputs shrink off the lead; counted conservatively as
unchanged). WFVAE: the largest activation over the band's rows, plus the decoded pieces held:
the whole video on the lead, 1/N elsewhere.
"""

from __future__ import annotations

import math

from .. import families
from .cost import Shape
from .models import ModelSpec
from .vae_cost import TILE, TILE_STRIDE

FRAME_BYTES = 2  # decoded pieces travel in the VAE's bfloat16
WFVAE_HALO_RELEASED = 10  # integrations/opensora_plan/split_decode.tail_halo for the release


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


class PassesAndTiles(Unsplit):
    """HunyuanVideo: diffusers' temporal passes x spatial tiles (tiled), handed out whole; its
    predictor already counts the held outputs and units run one at a time on one rank too: the
    same peak (conservative off the lead)."""

    def units(self, model: ModelSpec, shape: Shape, tiled: bool) -> int:
        from pipedit.integrations.hunyuan_video.vae_memory import decode_passes

        lt = model.latent_shape(shape.height, shape.width, shape.frames)[0]
        passes = decode_passes(model.vae, lt)[1]
        if not tiled:
            return passes
        tiles = [1 if pixels <= TILE else math.ceil(pixels / TILE_STRIDE) for pixels in (shape.height, shape.width)]
        return passes * tiles[0] * tiles[1]


class RowBands(Unsplit):
    """WFVAE: bands of latent rows, each with a halo on its inner sides; a rank holds the largest
    activation over its band plus the decoded pieces (the whole video on the lead)."""

    def units(self, model: ModelSpec, shape: Shape, tiled: bool) -> int:
        return model.latent_shape(shape.height, shape.width, shape.frames)[1]

    def slowest_share(self, count: int, ranks: int) -> float:
        band = min(count, math.ceil(count / ranks) + 2 * WFVAE_HALO_RELEASED)
        return band / count

    def rank_bytes(self, unit_peak: float, model: ModelSpec, shape: Shape, tiled: bool, ranks: int,
                   lead: bool) -> float:
        held = output_bytes(model, shape) * (1 if lead else 1 / ranks)
        return unit_peak * self.slowest_share(self.units(model, shape, tiled), ranks) + held


UNSPLIT, PASSES_AND_TILES, ROW_BANDS = Unsplit(), PassesAndTiles(), RowBands()


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
