"""What the adapters of diffusers-layout video models share, written once.

DiffusersVideoAdapter: the latents (a causal video VAE's shape, unit randn from the request's
generator) and a fresh scheduler per request from the checkpoint's own. FreeMemoryTiling: a VAE
decode tiled or not by the memory free for it, with one budget for all decode ranks. An adapter
inherits them before pipedit.model_hooks.AdapterHooks and supplies what they read (see each class).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch
from diffusers.utils.torch_utils import randn_tensor

from .adapter import VideoShape
from .sampling import SamplingParams


class DiffusersVideoAdapter:
    """Reads `temporal_ratio`, `spatial_ratio` (the VAE's compression), `latent_channels`, `device`,
    `components["scheduler"]` (the checkpoint's scheduler, a template never stepped) and the class's
    staticmethod `new_scheduler(template, sampling, device) -> (scheduler, timesteps)`: the family's
    schedule."""

    new_scheduler: Callable[[Any, SamplingParams, Any], tuple[Any, torch.Tensor]]
    temporal_ratio: int
    spatial_ratio: int
    latent_channels: int
    device: torch.device
    components: dict[str, Any]

    def latent_shape(self, shape: VideoShape) -> tuple[int, ...]:
        frames = (shape.num_frames - 1) // self.temporal_ratio + 1
        return (1, self.latent_channels, frames, shape.height // self.spatial_ratio,
                shape.width // self.spatial_ratio)

    def prepare_latents(self, shape: VideoShape, generator: torch.Generator) -> torch.Tensor:
        return randn_tensor(self.latent_shape(shape), generator=generator, device=self.device, dtype=torch.float32)

    def make_scheduler(self, sampling: SamplingParams):
        return self.new_scheduler(self.components["scheduler"], sampling, self.device)


class FreeMemoryTiling:
    """The VAE decode's tiling decided per decode from the memory free for it. Reads `vae_tiling`
    (auto, on or off), `vae_config`, `vae`, `device` and the class's `tiling_module`: the name of
    the family's module holding predict_decode_peak_bytes(vae_config, latent_shape, dtype),
    free_device_bytes(device) and should_tile(mode, device, predicted, free). They are looked up
    there at every decision, since the dry run replaces the last two in that module (the family's
    dry_run.tiling names it)."""

    tiling_module: str
    _decode_budget: int | None = None  # the decode ranks' common figure once fixed (fix_decode_budget)
    _encode_reserve: int = 0  # the text rank among the decode ranks: an encode's peak (reserve_for_encode)

    def decode_mode(self, latent_shape) -> int:
        """1: tiled, 0: untiled, as a decode of this shape on this rank would run now: on the
        decode ranks' common budget once the engine fixed one, else on this rank's free memory."""
        rules = importlib.import_module(self.tiling_module)
        predicted = rules.predict_decode_peak_bytes(self.vae_config, tuple(latent_shape), self.vae.dtype)
        free = self._decode_budget if self._decode_budget is not None else self.free_decode_bytes()
        return int(rules.should_tile(self.vae_tiling, self.device, predicted, free))

    def free_decode_bytes(self) -> int | None:
        free = importlib.import_module(self.tiling_module).free_device_bytes(self.device)
        return None if free is None else free - self._encode_reserve

    def reserve_for_encode(self, peak_bytes: int) -> None:
        # Under DeDiVAE the next request's prompt (and image) encode runs on the text rank while
        # it decodes: free memory measured while the rank is idle would promise the decode the
        # encode's share too. The encode's peak is kept out of every decode decision.
        self._encode_reserve = int(peak_bytes)

    def fix_decode_budget(self, free_bytes: int) -> None:
        # Decode ranks hold different parts (one also holds the text encoders), so each one's own
        # free memory would tile a video on one rank and not on another: a request's frames would
        # depend on the rank that took it. The engine fixes the tightest rank's figure.
        self._decode_budget = free_bytes
