"""WF-VAE's decode cut into row bands, one per rank, each with a halo of latent rows.

Where the cut is: the decoder's head (conv_in and the mid block, whose attention spans every
position of a frame) runs on the whole latent grid on every rank: cheap, it is at latent
resolution. Its tail (decoder.tail: convolutions, upsamplers, inverse wavelets and, for the
released config's `layernorm`, per-position norms) runs on a band of the head's output rows plus
a halo, and the band's own output rows are kept. Frames stay whole, so the causal temporal
convolutions and the tiled (cached) temporal decode work per band as they do for the whole frame.
A config with `groupnorm` normalises over the whole frame after the cut too: it is not split.

The halo (in latent rows) is the tail's receptive field, derived layer by layer below. A band's
cut edge is wrong where the tail's zero padding or interpolation clamp sees the edge instead of the
neighbouring rows; the error moves inward by each layer's reach, so a band whose halo covers the
whole reach keeps every row it returns equal to the full decode up to float rounding (the tests
check that one row less is visibly wrong).
"""

from __future__ import annotations

import torch

SPATIAL = 8  # output pixels per latent row


def tail_halo(config) -> int:
    """Latent rows the tail's outputs for one latent row depend on, on either side.

    Reach per resolution (rows at that resolution; a 3x3 convolution reaches 1, a ResnetBlock3D 2):
    - x4 (after up1's upsample): Upsample's conv 1, up1's last ResnetBlock3D 2, `layer`'s two 4,
      conv_out 1: 8. The inverse wavelets map row r to rows 2r, 2r+1: they add nothing.
    - x2: up1's nearest upsample halves that (ceil(8 / 2) = 4); up1's blocks 2 x blocks; before
      it up2's upsample conv 1 and its ResnetBlock3D 2. connect_l1 (from that ResnetBlock3D's
      output) reaches 2 x connect_res_layer_num + 1 instead of up1's path.
    - x1 (latent): up2's trilinear x2 (align_corners False) reads source rows floor(y/2 - 1/4)
      and the next, so a reach of R rows at x2 needs floor(R / 2) + 1 rows here; up2's blocks
      2 x blocks. connect_l2 (straight from the head) reaches 2 x connect_res_layer_num + 1.
    """
    blocks, connect = config.decoder_num_resblocks, config.connect_res_layer_num
    reach_x4 = 1 + 2 + 4 + 1
    reach_x2 = 3 + max(-(-reach_x4 // 2) + 2 * blocks, 2 * connect + 1)
    return max(2 * blocks + reach_x2 // 2 + 1, 2 * connect + 1)


def splittable(config) -> bool:
    return config.norm_type == "layernorm"


def band_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    """`parts` bands of nearly equal height (at most `rows` bands of one row)."""
    parts = max(1, min(parts, rows))
    edges = [round(k * rows / parts) for k in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


class BandPlan:
    """The bands of one decode of scaled latents [B, 8, T, h, w]."""

    def __init__(self, vae, latents: torch.Tensor, tiled: bool, parts: int, halo: int | None = None):
        self.vae, self.tiled = vae, tiled
        self.z = vae.unscaled(latents)
        self.halo = tail_halo(vae.config) if halo is None else halo
        self.bands = band_bounds(self.z.shape[3], parts) if splittable(vae.config) else [(0, self.z.shape[3])]
        self.costs = [float(self._window(band)[1] - self._window(band)[0]) for band in self.bands]
        self._head = None  # the untiled head output, shared by this rank's bands

    @property
    def dtype(self) -> torch.dtype:
        return self.z.dtype

    def _window(self, band: tuple[int, int]) -> tuple[int, int]:
        return max(0, band[0] - self.halo), min(self.z.shape[3], band[1] + self.halo)

    def output_shape(self, unit: int) -> tuple[int, ...]:
        batch, _, frames, _, width = self.z.shape
        start, end = self.bands[unit]
        return (batch, 3, 4 * (frames - 1) + 1, SPATIAL * (end - start), SPATIAL * width)

    @torch.no_grad()
    def decode_unit(self, unit: int) -> torch.Tensor:
        (start, end), decoder = self.bands[unit], self.vae.decoder
        low, high = self._window((start, end))
        if self.tiled:  # the causal caches run chunk after chunk through head and band alike
            video = self.vae._tiled_decode(self.z, lambda chunk: decoder.tail(decoder.head(chunk)[..., low:high, :]))
        else:
            self.vae._set_cached(False)
            if self._head is None:
                self._head = decoder.head(self.z)
            video = decoder.tail(self._head[..., low:high, :])
        return video[..., SPATIAL * (start - low):SPATIAL * (end - low), :]

    def assemble(self, pieces: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(pieces, dim=3)
