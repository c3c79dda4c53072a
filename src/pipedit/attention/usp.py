"""Sequence-parallel attention: Ulysses within ctx.ulysses_group, ring across ctx.ring_group.

One class serves "usp", "ulysses" (ring_degree 1) and "ring" (ulysses_degree 1).

Flow per call:
1. q, k, v all-to-alls (sequence-sharded -> head-sharded) are launched together, waited once.
   `start_sequence_to_heads` + `attend_heads` let a model start q's all-to-all while k, v are
   still being projected.
2. Local heads are processed in chunks of `chunk_heads` (PipeSP; None = all heads at once).
   Each chunk's attention (local SDPA, or the ring when ring_degree > 1) is followed by an
   async output all-to-all (head-sharded -> sequence-sharded) that overlaps the next chunk.
   With ring_degree > 1 every chunk runs its own ring pass (more, smaller P2P messages).
   chunk_heads is ignored when ulysses_degree == 1 (no all-to-all to overlap). Chunked and
   synchronous outputs are bit-identical: the same per-head kernels run, only data moves.
   The all-to-alls are async ops (pipedit.distributed.collectives): on NCCL they run on NCCL's
   stream, and the compute issued meanwhile overlaps them.
3. Text outputs (text is replicated, each rank attends its own heads) are all-gathered over heads.

Cross-attention (k = v = None) keeps the text keys replicated and slices their heads per rank,
like the joint text tokens: only the video queries and outputs move, and the model's text key
mask stays valid as is. A sparse `layout` is applied per chunk to the full sequence of the
chunk's heads (Ulysses only; a ring block does not hold the whole sequence).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pipedit.attention.base import (
    AttentionStrategy,
    JointTokens,
    TokenLayout,
    check_inputs,
    check_layout,
    check_shard_sizes,
    joint_attention,
)
from pipedit.attention.kernels import AttentionKernel, LseKernel
from pipedit.attention.ring import ring_attention
from pipedit.attention.ulysses_comm import (
    assemble_heads,
    start_gather_heads,
    start_heads_to_sequence,
    start_sequence_to_heads,
)
from pipedit.attention.usp_plan import HeadPlan, check_head_count, make_plan
from pipedit.distributed.collectives import Pending
from pipedit.distributed.context import ParallelContext


class USPAttention(AttentionStrategy):
    """Ulysses x ring attention with optional PipeSP head chunking of the output all-to-all."""

    name = "usp"

    def __init__(
        self,
        ctx: ParallelContext,
        *,
        chunk_heads: int | None = None,
        backend: str = "auto",
        num_heads: int | None = None,
    ) -> None:
        super().__init__(ctx)
        self.chunk_heads = chunk_heads
        self.kernel = AttentionKernel(backend)
        self.lse_kernel = LseKernel()
        self._plans: dict[tuple, HeadPlan] = {}
        if num_heads is not None:
            check_head_count(ctx, num_heads, self.name)

    @property
    def chunk_heads(self) -> int | None:
        """PipeSP heads per chunk (None: synchronous Ulysses); may be changed between calls."""
        return self._chunk_heads

    @chunk_heads.setter
    def chunk_heads(self, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 1):
            raise ValueError(
                f"chunk_heads must be a positive int or None (no chunking), got {value!r}; "
                f"'auto' must be resolved (pipedit.attention.autotune) before it is set here"
            )
        self._chunk_heads = value

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
        joint = check_inputs(self.ctx, q, k, v, shard_sizes, joint, layout)
        self._check_ring(layout)
        plan = self._plan(q.shape[2], shard_sizes)
        pending = [None if t is None else self._scatter(t, plan) for t in (q, k, v)]
        q_h, k_h, v_h = (None if p is None else p.wait() for p in pending)
        return self._attend(q_h, k_h, v_h, joint, plan, layout)

    def start_sequence_to_heads(
        self, x: torch.Tensor, shard_sizes: Sequence[int]
    ) -> Pending[torch.Tensor]:
        """Start [B, S_local, H, D] -> [B, S_ulysses_group, H_local, D]; .wait() returns it."""
        return self._scatter(x, self._plan(x.shape[2], shard_sizes))

    def attend_heads(
        self,
        q_h: torch.Tensor,
        k_h: torch.Tensor | None,
        v_h: torch.Tensor | None,
        *,
        num_heads: int,
        shard_sizes: Sequence[int],
        joint: JointTokens | None = None,
        layout: TokenLayout | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Steps 2-3 on head-sharded q, k, v from `start_sequence_to_heads` (as __call__ does)."""
        plan = self._plan(num_heads, shard_sizes)
        expected = (sum(plan.seq_sizes), plan.head_sizes[self.ctx.ulysses_rank])
        shapes = [tuple(t.shape) for t in (q_h, k_h, v_h) if t is not None]
        if tuple(q_h.shape[1:3]) != expected or (k_h is None) != (v_h is None) or len(set(shapes)) != 1:
            raise ValueError(
                f"head-sharded q, k, v must be [B, {expected[0]}, {expected[1]}, D] (k = v = None "
                f"for cross-attention), got {shapes}"
            )
        local_shape = (q_h.shape[0], shard_sizes[self.ctx.rank], num_heads, q_h.shape[3])
        joint = check_layout(self.ctx, local_shape, shard_sizes, joint, video_keys=k_h is not None,
                             layout=layout)
        self._check_ring(layout)
        return self._attend(q_h, k_h, v_h, joint, plan, layout)

    def _check_ring(self, layout: TokenLayout | None) -> None:
        if layout is not None and self.ctx.ring_degree > 1:
            raise ValueError(
                f"a sparse layout needs the whole sequence on a rank; ring_degree "
                f"{self.ctx.ring_degree} splits it: use 'ulysses' (ring_degree 1)"
            )

    def _plan(self, num_heads: int, shard_sizes: Sequence[int]) -> HeadPlan:
        """One plan per layout, made on first use (its index tensor lives on the device)."""
        key = (num_heads, tuple(shard_sizes), self.chunk_heads)
        plan = self._plans.get(key)
        if plan is None:
            check_head_count(self.ctx, num_heads, self.name)
            sizes = check_shard_sizes(self.ctx, shard_sizes)
            plan = self._plans[key] = make_plan(self.ctx, num_heads, sizes, self.chunk_heads)
        return plan

    def _scatter(self, x: torch.Tensor, plan: HeadPlan) -> Pending[torch.Tensor]:
        ctx = self.ctx
        return start_sequence_to_heads(
            x, plan.seq_sizes, plan.head_sizes, ctx.ulysses_rank, ctx.ulysses_group, ctx.state
        )

    def _attend(
        self,
        q_h: torch.Tensor,
        k_h: torch.Tensor | None,
        v_h: torch.Tensor | None,
        joint: JointTokens | None,
        plan: HeadPlan,
        layout: TokenLayout | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        me, group = self.ctx.ulysses_rank, self.ctx.ulysses_group
        first_head = sum(plan.head_sizes[:me])
        sends: list[Pending[torch.Tensor]] = []
        text_parts: list[torch.Tensor] = []
        start = 0
        for counts in plan.chunks:  # same number of chunks on every rank (some may be empty)
            stop = start + counts[me]
            part = None if joint is None else joint.heads(first_head + start, first_head + stop)
            heads = slice(start, stop)
            q_c, k_c, v_c = (None if t is None else t[:, :, heads] for t in (q_h, k_h, v_h))
            out, text_out = self._core(q_c, k_c, v_c, part, plan, layout)
            # Launched before the next chunk is computed: the all-to-all overlaps it (PipeSP).
            sends.append(start_heads_to_sequence(out, plan.seq_sizes, counts, me, group, self.ctx.state))
            if text_out is not None:
                text_parts.append(text_out)
            start = stop
        text = None
        if text_parts:
            text_local = torch.cat(text_parts, dim=2)
            text = start_gather_heads(text_local, plan.head_sizes, group, self.ctx.state)
        out = assemble_heads([s.wait() for s in sends], plan.order_index)
        return out, None if text is None else text.wait()

    def _core(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        joint: JointTokens | None,
        plan: HeadPlan,
        layout: TokenLayout | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # Cross-attention has no video keys to circulate: each ring block attends the text alone.
        if plan.ring is None or k is None or v is None:
            return joint_attention(self.kernel, q, k, v, joint, layout)
        return ring_attention(self.lse_kernel, q, k, v, joint, plan.ring)


class UlyssesAttention(USPAttention):
    """All-to-all sequence parallelism over all SP ranks (ctx.ring_degree must be 1)."""

    name = "ulysses"

    def __init__(
        self,
        ctx: ParallelContext,
        *,
        chunk_heads: int | None = None,
        backend: str = "auto",
        num_heads: int | None = None,
    ) -> None:
        if ctx.ring_degree != 1:
            raise ValueError(
                f"'ulysses' needs ring_degree 1, got ulysses_degree={ctx.ulysses_degree} x "
                f"ring_degree={ctx.ring_degree}; use 'usp' for that layout"
            )
        super().__init__(ctx, chunk_heads=chunk_heads, backend=backend, num_heads=num_heads)


class RingAttention(USPAttention):
    """Ring attention over all SP ranks (ctx.ulysses_degree must be 1); no all-to-all."""

    name = "ring"

    def __init__(
        self, ctx: ParallelContext, *, backend: str = "auto", num_heads: int | None = None
    ) -> None:
        if ctx.ulysses_degree != 1:
            raise ValueError(
                f"'ring' needs ulysses_degree 1, got ulysses_degree={ctx.ulysses_degree} x "
                f"ring_degree={ctx.ring_degree}; use 'usp' for that layout"
            )
        super().__init__(ctx, backend=backend, num_heads=num_heads)

    @USPAttention.chunk_heads.setter  # type: ignore[attr-defined]
    def chunk_heads(self, value: int | None) -> None:
        if value is not None:
            raise ValueError("'ring' has no all-to-all to pipeline: chunk_heads must be None")
        self._chunk_heads = None
