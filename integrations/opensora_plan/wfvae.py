"""WF-VAE (WFVAEModel_D8_4x8x8) of Open-Sora-Plan v1.3: wavelet-flow encoder and decoder, with
the official parameter names, latent scale/shift, and optional causal temporal tiling.

Video [B, 3, F, H, W] in [-1, 1], F = 4k+1  <->  latents [B, 8, k+1, H/8, W/8].
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import nn

from pipedit.errors import ModelPathError

from .checkpoint import load_module_state, read_json

from .wfvae_blocks import (
    AttnBlock3DFix, CausalConv3d, Conv2d, Downsample, HaarWaveletTransform2D, HaarWaveletTransform3D,
    InverseHaarWaveletTransform2D, InverseHaarWaveletTransform3D, ResnetBlock2D, ResnetBlock3D,
    Spatial2xTime2x3DDownsample, Spatial2xTime2x3DUpsample, Upsample, make_norm,
)

DECODE_CHUNK = 2  # latent frames per tiled-decode chunk (the official t_chunk_dec)
DROPPED_OVERLAP_FRAMES = 4  # output frames of the one-latent-frame overlap, dropped per chunk


@dataclass(frozen=True)
class WFVAEConfig:
    latent_dim: int = 8
    base_channels: int = 128
    encoder_num_resblocks: int = 2
    encoder_energy_flow_hidden_size: int = 64
    decoder_num_resblocks: int = 2
    decoder_energy_flow_hidden_size: int = 128
    use_attention: bool = True
    norm_type: str = "groupnorm"
    t_interpolation: str = "nearest"
    connect_res_layer_num: int = 1
    scale: tuple = (0.18215,) * 8
    shift: tuple = (0.0,) * 8

    @classmethod
    def from_dict(cls, data: dict) -> "WFVAEConfig":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("scale", "shift"):
            if name in values:
                values[name] = tuple(float(v) for v in values[name])
        config = cls(**values)
        for block in ("l1_dowmsample_block", "l2_dowmsample_block", "l1_upsample_block", "l2_upsample_block",
                      "attention_type", "l1_downsample_wavelet", "l2_downsample_wavelet",
                      "l1_upsample_wavelet", "l2_upsample_wavelet"):
            allowed = _DEFAULT_BLOCKS[block]
            if data.get(block, allowed) != allowed:
                raise ValueError(f"{block} {data[block]!r} is not supported (only {allowed!r}, the v1.3 release's)")
        if len(config.scale) != config.latent_dim or len(config.shift) != config.latent_dim:
            raise ValueError(f"scale and shift need latent_dim ({config.latent_dim}) values each")
        return config


_DEFAULT_BLOCKS = {
    "l1_dowmsample_block": "Downsample", "l1_downsample_wavelet": "HaarWaveletTransform2D",
    "l2_dowmsample_block": "Spatial2xTime2x3DDownsample", "l2_downsample_wavelet": "HaarWaveletTransform3D",
    "l1_upsample_block": "Upsample", "l1_upsample_wavelet": "InverseHaarWaveletTransform2D",
    "l2_upsample_block": "Spatial2xTime2x3DUpsample", "l2_upsample_wavelet": "InverseHaarWaveletTransform3D",
    "attention_type": "AttnBlock3DFix",
}


class Encoder(nn.Module):
    def __init__(self, c: WFVAEConfig):
        super().__init__()
        base, flow, norm = c.base_channels, c.encoder_energy_flow_hidden_size, c.norm_type
        blocks = c.encoder_num_resblocks
        self.down1 = nn.Sequential(
            Conv2d(24, base, 3, padding=1), *[ResnetBlock2D(base, base, norm) for _ in range(blocks)],
            Downsample(base, base),
        )
        self.down2 = nn.Sequential(
            Conv2d(base + flow, 2 * base, 3, padding=1),
            *[ResnetBlock3D(2 * base, 2 * base, norm) for _ in range(blocks)],
            Spatial2xTime2x3DDownsample(2 * base, 2 * base),
        )
        self.connect_l1 = Conv2d(12, flow, 3, padding=1)
        self.connect_l2 = Conv2d(24, flow, 3, padding=1)
        mid = [ResnetBlock3D(2 * base + flow, 4 * base, norm), ResnetBlock3D(4 * base, 4 * base, norm)]
        if c.use_attention:
            mid.insert(1, AttnBlock3DFix(4 * base, norm))
        self.mid = nn.Sequential(*mid)
        self.norm_out = make_norm(4 * base, norm)
        self.conv_out = CausalConv3d(4 * base, 2 * c.latent_dim, 3, padding=1)
        self.wavelet_transform_in = HaarWaveletTransform3D()
        self.wavelet_transform_l1 = HaarWaveletTransform2D()
        self.wavelet_transform_l2 = HaarWaveletTransform3D()

    def forward(self, x):
        coeffs = self.wavelet_transform_in(x)
        l1_coeffs = self.wavelet_transform_l1(coeffs[:, :3])
        l1 = self.connect_l1(l1_coeffs)
        l2 = self.connect_l2(self.wavelet_transform_l2(l1_coeffs[:, :3]))
        h = self.down2(torch.cat((self.down1(coeffs), l1), dim=1))
        h = self.mid(torch.cat((h, l2), dim=1))
        return self.conv_out(nn.functional.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, c: WFVAEConfig):
        super().__init__()
        base, flow, norm = c.base_channels, c.decoder_energy_flow_hidden_size, c.norm_type
        blocks = c.decoder_num_resblocks
        self.flow = flow
        self.conv_in = CausalConv3d(c.latent_dim, 4 * base, 3, padding=1)
        mid = [ResnetBlock3D(4 * base, 4 * base, norm), ResnetBlock3D(4 * base, 4 * base + flow, norm)]
        if c.use_attention:
            mid.insert(1, AttnBlock3DFix(4 * base, norm))
        self.mid = nn.Sequential(*mid)
        self.up2 = nn.Sequential(
            *[ResnetBlock3D(4 * base, 4 * base, norm) for _ in range(blocks)],
            Spatial2xTime2x3DUpsample(4 * base, 4 * base, c.t_interpolation),
            ResnetBlock3D(4 * base, 4 * base + flow, norm),
        )
        self.up1 = nn.Sequential(
            *[ResnetBlock3D(base * (4 if i == 0 else 2), 2 * base, norm) for i in range(blocks)],
            Upsample(2 * base, 2 * base),
            ResnetBlock3D(2 * base, 2 * base, norm),
        )
        self.layer = nn.Sequential(ResnetBlock3D(2 * base, base, norm), ResnetBlock3D(base, base, norm))
        self.connect_l1 = nn.Sequential(
            *[ResnetBlock3D(flow, flow, norm) for _ in range(c.connect_res_layer_num)], Conv2d(flow, 12, 3, padding=1),
        )
        self.connect_l2 = nn.Sequential(
            *[ResnetBlock3D(flow, flow, norm) for _ in range(c.connect_res_layer_num)], Conv2d(flow, 24, 3, padding=1),
        )
        self.norm_out = make_norm(base, norm)
        self.conv_out = Conv2d(base, 24, 3, padding=1)
        self.inverse_wavelet_transform_out = InverseHaarWaveletTransform3D()
        self.inverse_wavelet_transform_l1 = InverseHaarWaveletTransform2D()
        self.inverse_wavelet_transform_l2 = InverseHaarWaveletTransform3D()

    def forward(self, z):
        return self.tail(self.head(z))

    def head(self, z):
        """Up to the mid block (its attention spans each whole frame): on the latent grid."""
        return self.mid(self.conv_in(z))

    def tail(self, h):
        """After the mid block: convolutions, upsamplers and per-position norms only (with
        layernorm), so rows far enough apart are independent (row bands: split_decode.py)."""
        l2 = self.inverse_wavelet_transform_l2(self.connect_l2(h[:, -self.flow:]))
        h = self.up2(h[:, :-self.flow])
        l1_coeffs = self.connect_l1(h[:, -self.flow:])
        l1_coeffs = torch.cat((l1_coeffs[:, :3] + l2, l1_coeffs[:, 3:]), dim=1)
        l1 = self.inverse_wavelet_transform_l1(l1_coeffs)
        h = self.layer(self.up1(h[:, :-self.flow]))
        h = self.conv_out(nn.functional.silu(self.norm_out(h)))
        h = torch.cat((h[:, :3] + l1, h[:, 3:]), dim=1)
        return self.inverse_wavelet_transform_out(h)


class WFVAE(nn.Module):
    def __init__(self, config: WFVAEConfig, with_encoder: bool = True):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config) if with_encoder else None  # decode-only ranks skip its memory
        self.decoder = Decoder(config)
        self.tiling = False
        # Chunk overlap bookkeeping of the tiled decode: the blocks before the temporal upsample
        # see one extra latent frame per chunk, those after it two.
        d = self.decoder
        self._set_offset([d.up2, d.connect_l2, d.conv_in, d.mid], 1)
        self._set_offset([d.up2[-2:], d.up1, d.connect_l1, d.layer], 2)

    @staticmethod
    def _set_offset(modules, offset: int) -> None:
        for module in modules:
            for sub in module.modules():
                if isinstance(sub, CausalConv3d):
                    sub.cache_offset = offset

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.conv_in.conv.weight.dtype

    def _latent_stats(self, like: torch.Tensor):
        shape = (1, -1, 1, 1, 1)
        scale = torch.tensor(self.config.scale, dtype=like.dtype, device=like.device).view(shape)
        shift = torch.tensor(self.config.shift, dtype=like.dtype, device=like.device).view(shape)
        return scale, shift

    @torch.no_grad()
    def encode(self, video: torch.Tensor) -> torch.Tensor:
        """Video [B, 3, F, H, W] in [-1, 1] -> the posterior mean, scaled: (mean - shift) * scale."""
        if self.encoder is None:
            raise RuntimeError("this WFVAE was loaded without its encoder")
        mean = self.encoder(video.to(self.dtype))[:, : self.config.latent_dim]
        scale, shift = self._latent_stats(mean)
        return (mean - shift) * scale

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, tiled: bool | None = None) -> torch.Tensor:
        """Scaled latents [B, 8, T, h, w] -> video [B, 3, 4(T-1)+1, 8h, 8w] in about [-1, 1].
        tiled None follows `self.tiling`. The tiled decode equals the untiled one for odd T; for
        even T its last 4 frames differ (as the official causal cache does)."""
        z = self.unscaled(latents)
        tiled = self.tiling if tiled is None else tiled
        if not tiled:
            self._set_cached(False)
            return self.decoder(z)
        if z.shape[2] < 3:
            raise ValueError(f"tiled decode needs at least 3 latent frames, got {z.shape[2]}; decode untiled")
        return self._tiled_decode(z, self.decoder)

    def unscaled(self, latents: torch.Tensor) -> torch.Tensor:
        """Scaled latents -> the decoder's input (latents / scale + shift, in the VAE's dtype)."""
        scale, shift = self._latent_stats(latents)
        return (latents / scale + shift).to(self.dtype)

    def _set_cached(self, cached: bool, first_chunk: bool = True) -> None:
        for module in self.decoder.modules():
            if hasattr(module, "cached"):
                module.cached = cached
            if hasattr(module, "first_chunk"):
                module.first_chunk = first_chunk

    def _tiled_decode(self, z: torch.Tensor, run) -> torch.Tensor:
        """The causal temporal tiling; `run` maps a chunk of latent frames to its decoded frames
        (the decoder, or a row band of it), reusing the causal modules' caches chunk to chunk."""
        frames = z.shape[2]
        for module in self.decoder.modules():
            if hasattr(module, "cache"):
                module.cache.clear()
        bounds, start = [(0, 1)], 1
        while start < frames:
            end = min(frames, start + DECODE_CHUNK)
            bounds.append((start, end))
            start = end
        pieces = []
        try:
            for index, (start, end) in enumerate(bounds):
                self._set_cached(True, first_chunk=index == 0)
                overlap = end + 1 < frames
                chunk = run(z[:, :, start:end + 1 if overlap else end])
                pieces.append(chunk[:, :, :-DROPPED_OVERLAP_FRAMES] if overlap else chunk)
        finally:
            self._set_cached(False)
        return torch.cat(pieces, dim=2)


def vae_state_dict(checkpoint: dict) -> dict[str, torch.Tensor]:
    """merged.ckpt as the official loader reads it: a non-empty ema_state_dict ("module."
    stripped), else state_dict (or state_dict["gen_model"])."""
    ema = checkpoint.get("ema_state_dict")
    if isinstance(ema, dict) and ema:
        return {key.replace("module.", ""): value for key, value in ema.items()}
    state = checkpoint.get("state_dict")
    if isinstance(state, dict):
        return state["gen_model"] if isinstance(state.get("gen_model"), dict) else state
    raise ValueError("holds neither a non-empty ema_state_dict nor a state_dict")


# Fixed Haar constants the module builds itself; a checkpoint may or may not store them.
HAAR_KEYS = ("wavelet_transform",)


def load_wfvae(folder, dtype: torch.dtype | None = None, device="cpu", with_encoder: bool = True) -> WFVAE:
    """vae/config.json + vae/merged.ckpt (the decoder, and the encoder when asked)."""
    folder = Path(folder)
    try:
        config = WFVAEConfig.from_dict(read_json(folder / "config.json"))
    except (TypeError, ValueError) as error:
        raise ModelPathError(f"{folder / 'config.json'}: {error}") from error
    ckpt_file = folder / "merged.ckpt"
    if not ckpt_file.is_file():
        raise ModelPathError(f"{ckpt_file} is missing")
    try:
        state = vae_state_dict(_load_checkpoint(ckpt_file))
    except ValueError as error:
        raise ModelPathError(f"{ckpt_file} {error}") from error
    model = WFVAE(config, with_encoder)
    if not with_encoder:
        state = {k: v for k, v in state.items() if not k.startswith("encoder.")}
    load_module_state(model, state, ckpt_file, optional_prefixes=HAAR_KEYS)
    stored = next(iter(state.values())).dtype
    model = model.to(device=torch.device(device), dtype=dtype or stored)
    model.requires_grad_(False)
    return model.eval()


def _load_checkpoint(file) -> dict:
    """Tensors-only unpickling first; a checkpoint that also pickles other objects (training
    state) is loaded fully, as the official loader does."""
    import pickle

    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        return torch.load(file, map_location="cpu", weights_only=False)
