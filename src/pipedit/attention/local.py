""""local": single-device attention, the reference every parallel strategy is tested against."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pipedit.attention.base import AttentionStrategy, JointTokens, TokenLayout, check_inputs, joint_attention
from pipedit.attention.kernels import AttentionKernel
from pipedit.distributed.context import ParallelContext


class LocalAttention(AttentionStrategy):
    """torch SDPA over one call (see AttentionStrategy) with a boolean key mask; xformers / flash on CUDA by probe."""

    name = "local"

    def __init__(self, ctx: ParallelContext, *, backend: str = "auto") -> None:
        if ctx.world_size != 1:
            raise ValueError(
                f"'local' attention needs a single-rank context, got world_size "
                f"{ctx.world_size}; use 'ulysses', 'ring' or 'usp' for sequence parallelism, "
                f"or ParallelContext.single()"
            )
        super().__init__(ctx)
        self.kernel = AttentionKernel(backend)

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
        return joint_attention(self.kernel, q, k, v, joint, layout)
