"""HunyuanVideo's VAE decode cut along the units diffusers' decode already computes one by one.

diffusers' AutoencoderKLHunyuanVideo (0.42.1) decodes more than tile_sample_min_num_frames //
temporal_ratio latent frames in temporal chunks (`_temporal_tiled_decode`: a chunk every
tile_sample_stride_num_frames // temporal_ratio latent frames, one frame longer than the minimum),
and, with tiling on, each chunk whose frame is larger than one tile in overlapping spatial tiles
(`tiled_decode`). Each (chunk, tile) runs post_quant_conv + decoder on its own input, so the units
can run on any rank; the blending afterwards (rows, then columns, then time: linear ramps over the
overlaps, each blend written into the later tile in place and read again by the next blend) is
redone here in the same order with the same arithmetic. The result is therefore the single-rank
decode of the same mode (tiled or untiled) up to the units' own kernels: on one CPU model the
same bits (see the tests), across machines float rounding.

A video of one chunk and one tile is one unit: nothing to split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Unit:
    chunk: int  # temporal chunk index
    row: int  # tile row / column inside the chunk (0, 0 when the chunk is not tiled)
    col: int
    frames: tuple[int, int]  # latent slices
    rows: tuple[int, int]
    cols: tuple[int, int]


class TilePlan:
    """The units of one decode of scaled latents z [B, C, T, h, w] (already / scaling_factor, in
    the VAE's dtype) and how to put them together again."""

    def __init__(self, vae, z: torch.Tensor, tiled: bool):
        self.vae, self.z = vae, z
        s, t = vae.spatial_compression_ratio, vae.temporal_compression_ratio
        self.ratios = (s, t)
        self.tile = (vae.tile_sample_min_height // s, vae.tile_sample_min_width // s)
        self.stride = (vae.tile_sample_stride_height // s, vae.tile_sample_stride_width // s)
        self.blend = (vae.tile_sample_min_height - vae.tile_sample_stride_height,
                      vae.tile_sample_min_width - vae.tile_sample_stride_width,
                      vae.tile_sample_min_num_frames - vae.tile_sample_stride_num_frames)
        frames = z.shape[2]
        self.framewise = vae.use_framewise_decoding and frames > vae.tile_sample_min_num_frames // t
        chunk_len = vae.tile_sample_min_num_frames // t + 1
        starts = range(0, frames, vae.tile_sample_stride_num_frames // t) if self.framewise else [0]
        self.chunks = [(i, min(frames, i + chunk_len) if self.framewise else frames) for i in starts]
        self.tiled_chunks: set[int] = set()  # chunks decoded in spatial tiles
        self.units = [unit for index, span in enumerate(self.chunks) for unit in self._tiles(index, span, tiled)]
        self.costs = [float((u.frames[1] - u.frames[0]) * (u.rows[1] - u.rows[0]) * (u.cols[1] - u.cols[0]))
                      for u in self.units]

    def _tiles(self, chunk: int, frames: tuple[int, int], tiled: bool) -> list[Unit]:
        height, width = self.z.shape[3:]
        if not (tiled and (width > self.tile[1] or height > self.tile[0])):
            return [Unit(chunk, 0, 0, frames, (0, height), (0, width))]
        self.tiled_chunks.add(chunk)
        return [Unit(chunk, r, c, frames, (i, min(height, i + self.tile[0])), (j, min(width, j + self.tile[1])))
                for r, i in enumerate(range(0, height, self.stride[0]))
                for c, j in enumerate(range(0, width, self.stride[1]))]

    @property
    def dtype(self) -> torch.dtype:
        return self.z.dtype

    def output_shape(self, unit: int) -> tuple[int, ...]:
        u, (s, t) = self.units[unit], self.ratios
        channels = self.vae.config.out_channels
        frames = (u.frames[1] - u.frames[0] - 1) * t + 1
        return (self.z.shape[0], channels, frames, (u.rows[1] - u.rows[0]) * s, (u.cols[1] - u.cols[0]) * s)

    @torch.no_grad()
    def decode_unit(self, unit: int) -> torch.Tensor:
        u = self.units[unit]
        tile = self.z[:, :, u.frames[0]:u.frames[1], u.rows[0]:u.rows[1], u.cols[0]:u.cols[1]]
        return self.vae.decoder(self.vae.post_quant_conv(tile))

    def assemble(self, pieces: list[torch.Tensor]) -> torch.Tensor:
        """Unit outputs -> the video [B, 3, F, H, W] as diffusers' decode returns it."""
        chunks = [self._spatial(index, pieces) for index in range(len(self.chunks))]
        if not self.framewise:
            return chunks[0]
        chunks = [chunk if index == 0 else chunk[:, :, 1:] for index, chunk in enumerate(chunks)]
        stride_t = self.vae.tile_sample_stride_num_frames
        kept = [chunks[0][:, :, : stride_t + 1]]
        for index in range(1, len(chunks)):
            kept.append(blend(chunks[index - 1], chunks[index], self.blend[2], dim=2)[:, :, :stride_t])
        frames = (self.z.shape[2] - 1) * self.ratios[1] + 1
        return torch.cat(kept, dim=2)[:, :, :frames]

    def _spatial(self, chunk: int, pieces: list[torch.Tensor]) -> torch.Tensor:
        units = [(u, piece) for u, piece in zip(self.units, pieces) if u.chunk == chunk]
        if chunk not in self.tiled_chunks:
            return units[0][1]
        grid: dict[tuple[int, int], torch.Tensor] = {(u.row, u.col): piece for u, piece in units}
        rows, cols = max(r for r, _ in grid) + 1, max(c for _, c in grid) + 1
        stride_h, stride_w = self.vae.tile_sample_stride_height, self.vae.tile_sample_stride_width
        # Order matters: each blend writes into the later tile, which later blends read.
        for r in range(rows):
            for c in range(cols):
                if r > 0:
                    blend(grid[r - 1, c], grid[r, c], self.blend[0], dim=3)
                if c > 0:
                    blend(grid[r, c - 1], grid[r, c], self.blend[1], dim=4)
        band = [torch.cat([grid[r, c][:, :, :, :stride_h, :stride_w] for c in range(cols)], dim=4) for r in range(rows)]
        height, width = self.z.shape[3] * self.ratios[0], self.z.shape[4] * self.ratios[0]
        return torch.cat(band, dim=3)[:, :, :, :height, :width]


def blend(before: torch.Tensor, after: torch.Tensor, extent: int, dim: int) -> torch.Tensor:
    """A linear ramp from `before`'s last `extent` slices into `after`'s first ones along `dim`,
    written into `after` (in place, as the tiles are reused) and returned."""
    extent = min(before.shape[dim], after.shape[dim], extent)
    for k in range(extent):
        weight = k / extent
        into = after.select(dim, k)
        into.copy_(before.select(dim, before.shape[dim] - extent + k) * (1 - weight) + into * weight)
    return after
