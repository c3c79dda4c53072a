"""The AttentionStrategy interface, input validation and the single-device joint attention."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipedit.attention.kernels import AttentionKernel
from pipedit.distributed.context import ParallelContext


@dataclass(frozen=True)
class JointTokens:
    """Text tokens [B, L, H, D], replicated on every rank; mask [B, L] marks valid keys."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    kv_mask: torch.Tensor | None

    def heads(self, start: int, stop: int) -> JointTokens:
        heads = slice(start, stop)
        return JointTokens(
            self.q[:, :, heads], self.k[:, :, heads], self.v[:, :, heads], self.kv_mask
        )


class AttentionStrategy(ABC):
    """Attention over [video_full ; text] for queries [video_full ; text], video sharded by rank.

    q, k, v: [B, S_local, H, D], this rank's contiguous shard of the video sequence;
    shard_sizes: every sp rank's shard length (len == ctx.world_size). Returns this rank's
    shard of the video output and the full text output (identical on all ranks) or None.
    """

    name: str = ""

    def __init__(self, ctx: ParallelContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        shard_sizes: Sequence[int],
        joint_q: torch.Tensor | None = None,
        joint_k: torch.Tensor | None = None,
        joint_v: torch.Tensor | None = None,
        joint_kv_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """See the class docstring."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self.ctx.world_size})"


def check_inputs(
    ctx: ParallelContext,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    shard_sizes: Sequence[int],
    joint: tuple[torch.Tensor | None, ...],
) -> JointTokens | None:
    """Validate shapes against the context; return the joint tokens (or None)."""
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"q, k, v must be [B, S_local, H, D] of equal shapes; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    return check_layout(ctx, tuple(q.shape), shard_sizes, joint)


def check_layout(
    ctx: ParallelContext,
    shape: tuple[int, ...],
    shard_sizes: Sequence[int],
    joint: tuple[torch.Tensor | None, ...],
) -> JointTokens | None:
    """Validate a local video shape [B, S_local, H, D] against shard_sizes and the joint tokens."""
    sizes = check_shard_sizes(ctx, shard_sizes)
    if sizes[ctx.rank] != shape[1]:
        raise ValueError(
            f"rank {ctx.rank} holds {shape[1]} tokens but shard_sizes[{ctx.rank}] = "
            f"{sizes[ctx.rank]}; use pipedit.distributed.sharding.shard_sizes(S, world_size)"
        )
    return _check_joint(shape, *joint)


def check_shard_sizes(ctx: ParallelContext, shard_sizes: Sequence[int]) -> tuple[int, ...]:
    sizes = tuple(shard_sizes)
    if len(sizes) != ctx.world_size or min(sizes) < 0:
        raise ValueError(
            f"shard_sizes must list {ctx.world_size} non-negative lengths (one per sp rank), "
            f"got {sizes}"
        )
    return sizes


def _check_joint(
    shape: tuple[int, ...],
    joint_q: torch.Tensor | None,
    joint_k: torch.Tensor | None,
    joint_v: torch.Tensor | None,
    mask: torch.Tensor | None,
) -> JointTokens | None:
    given = [t is not None for t in (joint_q, joint_k, joint_v)]
    if not any(given):
        if mask is not None:
            raise ValueError("joint_kv_mask given without joint_q/joint_k/joint_v")
        return None
    if not all(given):
        raise ValueError("pass all of joint_q, joint_k, joint_v, or none of them")
    assert joint_q is not None and joint_k is not None and joint_v is not None
    if joint_q.dim() != 4 or joint_q.shape != joint_k.shape or joint_q.shape != joint_v.shape:
        raise ValueError("joint_q, joint_k, joint_v must be [B, L, H, D] of equal shapes")
    batch, _, heads, dim = shape
    if (joint_q.shape[0], joint_q.shape[2], joint_q.shape[3]) != (batch, heads, dim):
        raise ValueError(
            f"joint tokens {tuple(joint_q.shape)} must match the video's batch, heads and head "
            f"dim {shape}"
        )
    if mask is not None and (mask.dtype != torch.bool or mask.shape != joint_q.shape[:2]):
        raise ValueError(
            f"joint_kv_mask must be a bool tensor of shape {tuple(joint_q.shape[:2])}, "
            f"got {mask.dtype} {tuple(mask.shape)}"
        )
    return JointTokens(joint_q, joint_k, joint_v, mask)


def joint_attention(
    kernel: AttentionKernel,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    joint: JointTokens | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Single-device attention over [video ; text] (q, k, v hold the whole video sequence)."""
    if joint is None:
        return kernel(q, k, v, None), None
    video = q.shape[1]
    key_mask = None
    if joint.kv_mask is not None:
        video_keys = joint.kv_mask.new_ones(q.shape[0], video)
        key_mask = torch.cat([video_keys, joint.kv_mask], dim=1)
    out = kernel(
        torch.cat([q, joint.q], dim=1),
        torch.cat([k, joint.k], dim=1),
        torch.cat([v, joint.v], dim=1),
        key_mask,
    )
    return out[:, :video], out[:, video:]
