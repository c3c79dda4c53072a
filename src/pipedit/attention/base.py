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
    """The one joint-token argument of a strategy call: text tokens [B, L, H, D], replicated on
    every rank; kv_mask [B, L] bool marks valid keys (None: all valid).

    q is None when the text tokens are keys only (cross-attention: video queries attend text).
    Checked against the video by the strategy (check_layout), which names what is missing."""

    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    kv_mask: torch.Tensor | None = None

    def heads(self, start: int, stop: int) -> JointTokens:
        heads = slice(start, stop)
        q = None if self.q is None else self.q[:, :, heads]
        return JointTokens(q, self.k[:, :, heads], self.v[:, :, heads], self.kv_mask)


class TokenLayout(ABC):
    """A sparse attention pattern over the whole video sequence (e.g. Skiparse), applied where a
    rank holds the full sequence for its heads (after the Ulysses all-to-all).

    Invariant: the layout is head-agnostic, so every head shard, chunk and Aco helper applies it
    alike: regroup maps [B, S, h, D] -> [B', S', h, D] for any h (independent sub-sequences
    stacked on the batch axis), ungroup is its inverse back to [B, S, h, D]."""

    @abstractmethod
    def regroup(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, h, D] -> [B', S', h, D]."""

    @abstractmethod
    def ungroup(self, x: torch.Tensor, seq_len: int) -> torch.Tensor:
        """[B', S', h, D] -> [B, seq_len, h, D]."""

    def key_mask(self, batch: int, seq_len: int, device: torch.device) -> torch.Tensor | None:
        """Valid keys of the regrouped sequence, bool [B', S'] (None: all valid)."""
        return None


class AttentionStrategy(ABC):
    """Attention for queries [video ; text] over keys [video ; text], video sharded by rank.

    q, k, v: [B, S_local, H, D], this rank's contiguous shard of the video sequence;
    shard_sizes: every sp rank's shard length (len == ctx.world_size). Three shapes of call:
    - joint attention (HunyuanVideo): video and text queries, keys and values (`joint` with q, k, v);
    - self-attention over video only, optionally with a sparse `layout` over the full sequence;
    - cross-attention: k = v = None, video queries attend the text keys (`joint` with k, v, no q).
    Returns this rank's shard of the video output and the full text output (identical on all
    ranks) when there are text queries, else None.
    """

    name: str = ""

    def __init__(self, ctx: ParallelContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        *,
        shard_sizes: Sequence[int],
        joint: JointTokens | None = None,
        layout: TokenLayout | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """See the class docstring."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self.ctx.world_size})"


def check_inputs(
    ctx: ParallelContext,
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    shard_sizes: Sequence[int],
    joint: JointTokens | None,
    layout: TokenLayout | None = None,
) -> JointTokens | None:
    """Validate shapes against the context; return the joint tokens (or None)."""
    shapes = [tuple(t.shape) for t in (q, k, v) if t is not None]
    if q.dim() != 4 or (k is None) != (v is None) or len(set(shapes)) != 1:
        raise ValueError(
            f"q, k, v must be [B, S_local, H, D] of equal shapes (k = v = None for "
            f"cross-attention); got {shapes}"
        )
    return check_layout(ctx, tuple(q.shape), shard_sizes, joint, video_keys=k is not None, layout=layout)


def check_layout(
    ctx: ParallelContext,
    shape: tuple[int, ...],
    shard_sizes: Sequence[int],
    joint: JointTokens | None,
    *,
    video_keys: bool = True,
    layout: TokenLayout | None = None,
) -> JointTokens | None:
    """Validate a local video shape [B, S_local, H, D] against shard_sizes, the joint tokens and
    the call shape (video keys or not, sparse layout or not)."""
    sizes = check_shard_sizes(ctx, shard_sizes)
    if sizes[ctx.rank] != shape[1]:
        raise ValueError(
            f"rank {ctx.rank} holds {shape[1]} tokens but shard_sizes[{ctx.rank}] = "
            f"{sizes[ctx.rank]}; use pipedit.distributed.sharding.shard_sizes(S, world_size)"
        )
    tokens = _check_joint(shape, joint or JointTokens())
    if not video_keys and tokens is None:
        raise ValueError("cross-attention (k = v = None) needs the text keys: pass joint=JointTokens(k=..., v=...)")
    if layout is not None:
        if not isinstance(layout, TokenLayout):
            raise TypeError(f"layout must be a pipedit.attention.base.TokenLayout, got {type(layout).__name__}")
        if tokens is not None or not video_keys:
            raise ValueError(
                "a sparse layout regroups video self-attention only: pass it without joint text "
                "tokens and with video k, v"
            )
    return tokens


def check_shard_sizes(ctx: ParallelContext, shard_sizes: Sequence[int]) -> tuple[int, ...]:
    sizes = tuple(shard_sizes)
    if len(sizes) != ctx.world_size or min(sizes) < 0:
        raise ValueError(
            f"shard_sizes must list {ctx.world_size} non-negative lengths (one per sp rank), "
            f"got {sizes}"
        )
    return sizes


def _check_joint(shape: tuple[int, ...], joint: JointTokens) -> JointTokens | None:
    """The joint tokens checked against the local video shape; None when they hold none."""
    text_q, text_k, text_v, mask = joint.q, joint.k, joint.v, joint.kv_mask
    if text_k is None or text_v is None:
        if text_k is None and text_v is None and text_q is None:
            if mask is not None:
                raise ValueError("a joint kv_mask given without joint_k and joint_v (JointTokens k, v)")
            return None
        raise ValueError(
            "JointTokens needs all of joint_q, joint_k, joint_v (its q, k, v: joint text tokens), or both "
            "joint_k and joint_v alone (text keys only, e.g. cross-attention), or none"
        )
    given = [t for t in (text_q, text_k, text_v) if t is not None]
    if text_k.dim() != 4 or any(t.shape != text_k.shape for t in given):
        raise ValueError("JointTokens q, k, v must be [B, L, H, D] of equal shapes")
    batch, _, heads, dim = shape
    if (text_k.shape[0], text_k.shape[2], text_k.shape[3]) != (batch, heads, dim):
        raise ValueError(
            f"joint tokens {tuple(text_k.shape)} must match the video's batch, heads and head "
            f"dim {shape}"
        )
    if mask is not None and (mask.dtype != torch.bool or mask.shape != text_k.shape[:2]):
        raise ValueError(
            f"JointTokens kv_mask must be a bool tensor of shape {tuple(text_k.shape[:2])}, "
            f"got {mask.dtype} {tuple(mask.shape)}"
        )
    return joint


def kernel_inputs(
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    joint: JointTokens | None,
    layout: TokenLayout | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The one attention-kernel problem (q, k, v, key mask) a call reduces to, given q, k, v
    holding the whole video sequence for some heads. `split_outputs` maps its output back."""
    if layout is not None:
        key_mask = layout.key_mask(q.shape[0], q.shape[1], q.device)
        return layout.regroup(q), layout.regroup(k), layout.regroup(v), key_mask  # type: ignore[arg-type]
    if joint is None:
        return q, k, v, None  # type: ignore[return-value]
    queries = q if joint.q is None else torch.cat([q, joint.q], dim=1)
    if k is None or v is None:
        return queries, joint.k, joint.v, joint.kv_mask
    key_mask = None
    if joint.kv_mask is not None:
        video_keys = joint.kv_mask.new_ones(q.shape[0], k.shape[1])
        key_mask = torch.cat([video_keys, joint.kv_mask], dim=1)
    return queries, torch.cat([k, joint.k], dim=1), torch.cat([v, joint.v], dim=1), key_mask


def split_outputs(
    out: torch.Tensor, seq_len: int, joint: JointTokens | None, layout: TokenLayout | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(video out [B, seq_len, h, D], text out or None) from the kernel output of `kernel_inputs`."""
    if layout is not None:
        return layout.ungroup(out, seq_len), None
    if joint is None or joint.q is None:
        return out, None
    return out[:, :seq_len], out[:, seq_len:]


def joint_attention(
    kernel: AttentionKernel,
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    joint: JointTokens | None,
    layout: TokenLayout | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Single-device attention of one call (q, k, v hold the whole video sequence)."""
    if q.shape[2] == 0:  # an empty PipeSP chunk: nothing to attend, and layouts need not handle it
        text = None if joint is None or joint.q is None else joint.q.new_empty(joint.q.shape)
        return q.new_empty(q.shape), text
    # Video keys come first and are all valid: only the joint text keys carry the mask.
    dense_keys = k.shape[1] if k is not None and layout is None and joint is not None else 0
    out = kernel(*kernel_inputs(q, k, v, joint, layout), dense_keys=dense_keys)
    return split_outputs(out, q.shape[1], joint, layout)
