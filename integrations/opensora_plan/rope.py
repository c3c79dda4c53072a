"""3D rotary position embedding of Open-Sora-Plan v1.3 (self-attention only).

head_dim is split into three contiguous chunks [t | h | w]; each uses rotate-half RoPE with
inv_freq = 1/10000^(arange(0, d, 2)/d) over the integer patch index / interpolation scale.
Positions are computable for any token range, so a rank holding a sequence shard can build
its own tables.
"""

from __future__ import annotations

import torch

ROPE_BASE = 10000.0


def token_positions(grid: tuple[int, int, int], start: int = 0, stop: int | None = None,
                    device=None) -> torch.Tensor:
    """(t, row, col) patch indices [stop-start, 3] of tokens start..stop of a (T, H, W) grid in
    (t, h, w) order, t slowest."""
    frames, height, width = grid
    stop = frames * height * width if stop is None else stop
    index = torch.arange(start, stop, device=device)
    return torch.stack((index // (height * width), (index // width) % height, index % width), dim=-1)


def rope_tables(positions: torch.Tensor, head_dim: int, scales=(1.0, 1.0, 1.0),
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each [S, head_dim]. The angles are computed in float32 and cast to `dtype`
    before cos/sin, as the official model does (so fp16/bf16 tables are low precision)."""
    if head_dim % 3 or (head_dim // 3) % 2:
        raise ValueError(f"3D RoPE needs head_dim divisible by 6, got {head_dim}")
    chunk = head_dim // 3
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, chunk, 2, device=positions.device).float() / chunk))
    cos, sin = [], []
    for axis in range(3):
        angles = (positions[:, axis].float() / scales[axis])[:, None] * inv_freq[None]
        angles = torch.cat((angles, angles), dim=-1).to(dtype)
        cos.append(angles.cos())
        sin.append(angles.sin())
    return torch.cat(cos, dim=-1), torch.cat(sin, dim=-1)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, S, H, D]; cos/sin [S, D]. Rotate-half within each of the three chunks."""
    cos, sin = cos[None, :, None], sin[None, :, None]
    parts = x.chunk(3, dim=-1)
    cos_parts, sin_parts = cos.chunk(3, dim=-1), sin.chunk(3, dim=-1)
    return torch.cat([p * c + _rotate_half(p) * s for p, c, s in zip(parts, cos_parts, sin_parts)], dim=-1)
