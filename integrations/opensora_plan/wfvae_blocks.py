"""Building blocks of WF-VAE (Open-Sora-Plan v1.3's video VAE), with the official parameter names.

Causal 3D convolutions pad in time by repeating the first frame. For the temporally tiled
decode ("causal cache") every causal module keeps the frames the next chunk needs: the module
state is reset per decode by the WFVAE (`reset_cache`) and only used while `cached` is on.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F
from torch import nn

HAAR_3D = 0.3536  # the official constant (not exactly 1/sqrt(8))


def per_frame(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Applies a 2D module to every frame of [B, C, T, H, W]."""
    batch, _, frames = x.shape[:3]
    y = module(x.transpose(1, 2).flatten(0, 1))
    return y.unflatten(0, (batch, frames)).transpose(1, 2)


class Conv2d(nn.Conv2d):
    """nn.Conv2d over the frames of a video."""

    def forward(self, x):
        return per_frame(super().forward, x) if x.dim() == 5 else super().forward(x)


class CausalConv3d(nn.Module):
    def __init__(self, chan_in: int, chan_out: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = True):
        super().__init__()
        self.time_kernel = kernel_size
        self.time_stride = stride
        self.conv = nn.Conv3d(chan_in, chan_out, kernel_size, stride=stride, padding=(0, padding, padding), bias=bias)
        self.cached = False
        self.first_chunk = True
        self.cache: deque = deque()
        self.cache_offset = 0  # trailing frames of a chunk that the next chunk repeats

    def forward(self, x):
        if self.first_chunk:
            pad = x[:, :, :1].repeat(1, 1, self.time_kernel - 1, 1, 1)
        else:
            pad = self.cache.popleft()
        x = torch.cat((pad, x), dim=2)
        if self.cached:
            keep = -(self.time_kernel - 1) // self.time_stride  # floor of the negative, as upstream
            if self.time_kernel == 1 or (self.time_kernel - 1) // self.time_stride == 0:
                self.cache.append(x[:, :, 0:0].clone())
            else:
                source = x[:, :, :-self.cache_offset] if self.cache_offset else x
                self.cache.append(source[:, :, keep:].clone())
        return self.conv(x)


class ChannelLayerNorm(nn.Module):
    """LayerNorm over channels (key `.norm.*`)."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x):
        return self.norm(x.movedim(1, -1)).movedim(-1, 1)


def make_norm(channels: int, norm_type: str) -> nn.Module:
    if norm_type == "layernorm":
        return ChannelLayerNorm(channels)
    if norm_type == "groupnorm":
        return nn.GroupNorm(32, channels, eps=1e-6, affine=True)
    raise ValueError(f"norm_type must be layernorm or groupnorm, got {norm_type!r}")


class ResnetBlock3D(nn.Module):
    def __init__(self, chan_in: int, chan_out: int, norm_type: str):
        super().__init__()
        self.norm1 = make_norm(chan_in, norm_type)
        self.conv1 = CausalConv3d(chan_in, chan_out, 3, padding=1)
        self.norm2 = make_norm(chan_out, norm_type)
        self.dropout = nn.Dropout(0.0)
        self.conv2 = CausalConv3d(chan_out, chan_out, 3, padding=1)
        if chan_in != chan_out:
            self.nin_shortcut = CausalConv3d(chan_in, chan_out, 1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class ResnetBlock2D(nn.Module):
    """Per-frame residual block (encoder)."""

    def __init__(self, chan_in: int, chan_out: int, norm_type: str):
        super().__init__()
        self.norm1 = make_norm(chan_in, norm_type)
        self.conv1 = nn.Conv2d(chan_in, chan_out, 3, padding=1)
        self.norm2 = make_norm(chan_out, norm_type)
        self.dropout = nn.Dropout(0.0)
        self.conv2 = nn.Conv2d(chan_out, chan_out, 3, padding=1)
        if chan_in != chan_out:
            self.nin_shortcut = nn.Conv2d(chan_in, chan_out, 1)

    def _forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h

    def forward(self, x):
        return per_frame(self._forward, x)


# Frames attend only within themselves, so the mid block's attention runs a few frames per call.
# Where a kernel materialises the scores ((h*w)^2 per frame: the math path on CPU, and on GPUs for
# this head dim of 512, beyond the fused kernels' 256) all 33 frames of a 720p video at once take
# 55 GiB (the dry run's count); this budget bounds them. The results are the same: each frame's
# attention is computed alone either way.
ATTENTION_SCORE_BUDGET_BYTES = 2 << 30


def frames_per_attention_call(tokens_per_frame: int) -> int:
    return max(1, ATTENTION_SCORE_BUDGET_BYTES // (4 * tokens_per_frame * tokens_per_frame))


class AttnBlock3DFix(nn.Module):
    """Single-head attention over h*w within each frame, scale c^-1/2, residual."""

    def __init__(self, channels: int, norm_type: str):
        super().__init__()
        self.norm = make_norm(channels, norm_type)
        self.q = CausalConv3d(channels, channels, 1)
        self.k = CausalConv3d(channels, channels, 1)
        self.v = CausalConv3d(channels, channels, 1)
        self.proj_out = CausalConv3d(channels, channels, 1)

    def forward(self, x):
        h = self.norm(x)
        batch, channels, frames, height, width = x.shape

        def tokens(t):  # [B*T, 1, h*w, C]
            return t.permute(0, 2, 3, 4, 1).reshape(batch * frames, 1, height * width, channels)

        q, k, v = tokens(self.q(h)), tokens(self.k(h)), tokens(self.v(h))
        step = frames_per_attention_call(height * width)
        out = torch.cat([F.scaled_dot_product_attention(q[i:i + step], k[i:i + step], v[i:i + step])
                         for i in range(0, q.shape[0], step)])
        out = out.reshape(batch, frames, height, width, channels).permute(0, 4, 1, 2, 3)
        return x + self.proj_out(out)


class Upsample(nn.Module):
    """Per frame: nearest x2, then Conv2d 3x3."""

    def __init__(self, chan_in: int, chan_out: int):
        super().__init__()
        self.conv = nn.Conv2d(chan_in, chan_out, 3, padding=1)

    def forward(self, x):
        return per_frame(lambda f: self.conv(F.interpolate(f, scale_factor=2.0, mode="nearest")), x)


class Downsample(nn.Module):
    """Per frame: zero-pad right/bottom by 1, Conv2d 3x3 stride 2."""

    def __init__(self, chan_in: int, chan_out: int):
        super().__init__()
        self.conv = nn.Conv2d(chan_in, chan_out, 3, stride=2)

    def forward(self, x):
        return per_frame(lambda f: self.conv(F.pad(f, (0, 1, 0, 1))), x)


class Spatial2xTime2x3DDownsample(nn.Module):
    def __init__(self, chan_in: int, chan_out: int):
        super().__init__()
        self.conv = CausalConv3d(chan_in, chan_out, 3, stride=2)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1, 0, 0)))


class Spatial2xTime2x3DUpsample(nn.Module):
    """Frame 0 is only upsampled spatially; frames 1.. x2 in time (t_interpolation), then x2 in
    space (trilinear): T -> 2T - 1; then a causal 3x3x3 conv."""

    def __init__(self, chan_in: int, chan_out: int, t_interpolation: str = "trilinear"):
        super().__init__()
        self.t_interpolation = t_interpolation
        self.conv = CausalConv3d(chan_in, chan_out, 3, padding=1)
        self.cached = False
        self.cache: deque = deque()

    def forward(self, x):
        if self.cached and self.cache:
            x = torch.cat((self.cache.popleft(), x), dim=2)
            self.cache.append(x[:, :, -2:-1].clone())
            x = F.interpolate(x, scale_factor=(2, 1, 1), mode=self.t_interpolation)[:, :, 2:]
            x = F.interpolate(x, scale_factor=(1, 2, 2), mode="trilinear")
        else:
            if self.cached:
                self.cache.append(x[:, :, -1:].clone())
            first = F.interpolate(x[:, :, :1], scale_factor=(1, 2, 2), mode="trilinear")
            if x.shape[2] > 1:
                rest = F.interpolate(x[:, :, 1:], scale_factor=(2, 1, 1), mode=self.t_interpolation)
                rest = F.interpolate(rest, scale_factor=(1, 2, 2), mode="trilinear")
                first = torch.cat((first, rest), dim=2)
            x = first
        return self.conv(x)


def _haar_3d_kernels() -> list[torch.Tensor]:
    """The 8 kernels [2(t), 2(h), 2(w)] in band order: LLL, w-high, h-high, hw-high, then the same
    with the second time slice negated."""
    low, high = torch.tensor([1.0, 1.0]), torch.tensor([1.0, -1.0])
    kernels = []
    for time in (low, high):
        for rows, cols in ((low, low), (low, high), (high, low), (high, high)):
            kernels.append(torch.einsum("t,h,w->thw", time, rows, cols) * HAAR_3D)
    return kernels


def _haar_2d_kernels() -> list[torch.Tensor]:
    low, high = torch.tensor([1.0, 1.0]), torch.tensor([1.0, -1.0])
    return [torch.outer(r, c) / 2 for r, c in ((low, low), (high, low), (low, high), (high, high))]


_HAAR_3D_NAMES = ("h", "g", "hh", "gh", "h_v", "g_v", "hh_v", "gh_v")
_HAAR_2D_NAMES = ("aa", "ad", "da", "dd")


class HaarWaveletTransform3D(nn.Module):
    """Forward 3D Haar: fixed causal convs (kernel 2, stride 2), stored as parameters."""

    def __init__(self):
        super().__init__()
        for name, kernel in zip(_HAAR_3D_NAMES, _haar_3d_kernels()):
            conv = CausalConv3d(1, 1, 2, stride=2, bias=False)
            conv.conv.weight.data = kernel.view(1, 1, 2, 2, 2)
            conv.requires_grad_(False)
            setattr(self, f"{name}_conv", conv)

    def forward(self, x):
        batch = x.shape[0]
        flat = x.flatten(0, 1).unsqueeze(1)
        bands = [getattr(self, f"{name}_conv")(flat).squeeze(1).unflatten(0, (batch, -1)) for name in _HAAR_3D_NAMES]
        return torch.cat(bands, dim=1)


class InverseHaarWaveletTransform3D(nn.Module):
    """Transposed convs (stride 2); drops the first output frame, except on a non-first chunk of
    a cached (tiled) decode."""

    def __init__(self):
        super().__init__()
        for name, kernel in zip(_HAAR_3D_NAMES, _haar_3d_kernels()):
            self.register_buffer(name, kernel.view(1, 1, 2, 2, 2))
        self.cached = False
        self.first_chunk = True

    def forward(self, coeffs):
        batch = coeffs.shape[0]
        out = 0
        for name, band in zip(_HAAR_3D_NAMES, coeffs.chunk(8, dim=1)):
            out = out + F.conv_transpose3d(band.flatten(0, 1).unsqueeze(1), getattr(self, name), stride=2)
        if not (self.cached and not self.first_chunk):
            out = out[:, :, 1:]
        return out.squeeze(1).unflatten(0, (batch, -1))


class HaarWaveletTransform2D(nn.Module):
    def __init__(self):
        super().__init__()
        for name, kernel in zip(_HAAR_2D_NAMES, _haar_2d_kernels()):
            self.register_buffer(name, kernel.view(1, 1, 2, 2))

    def _forward(self, x):
        batch = x.shape[0]
        flat = x.flatten(0, 1).unsqueeze(1)
        bands = [F.conv2d(flat, getattr(self, n), stride=2).squeeze(1).unflatten(0, (batch, -1)) for n in _HAAR_2D_NAMES]
        return torch.cat(bands, dim=1)

    def forward(self, x):
        return per_frame(self._forward, x)


class InverseHaarWaveletTransform2D(nn.Module):
    def __init__(self):
        super().__init__()
        for name, kernel in zip(_HAAR_2D_NAMES, _haar_2d_kernels()):
            self.register_buffer(name, kernel.view(1, 1, 2, 2))

    def _forward(self, coeffs):
        batch = coeffs.shape[0]
        out = 0
        for name, band in zip(_HAAR_2D_NAMES, coeffs.chunk(4, dim=1)):
            out = out + F.conv_transpose2d(band.flatten(0, 1).unsqueeze(1), getattr(self, name), stride=2)
        return out.squeeze(1).unflatten(0, (batch, -1))

    def forward(self, x):
        return per_frame(self._forward, x)
