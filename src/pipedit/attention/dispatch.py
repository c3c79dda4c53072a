"""The strategy call every family's attention processor makes, in one place.

A family's processor (integrations/<family>/parallel.py) keeps what its model's attention module
alone knows: the projections, norms and rotary embedding, which tokens are text, and the output
projection. It inherits this dispatch for the rest: handing each projected tensor to the
strategy as soon as it exists (a Ulysses-style strategy starts its all-to-all then, so the next
projections overlap it), the one strategy call with the video shards' sizes and the joint text
tokens (JointTokens) or a sparse layout, and the local kernel for attention that needs no
communication (video queries of this rank over replicated text keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pipedit.attention.base import AttentionStrategy, JointTokens, TokenLayout
from pipedit.distributed.shard_plan import SequenceShards


class SequenceParallelProcessor:
    """The shared part of a sequence-parallel attention processor over `strategy`.

    `shards`: the video sequence's shards (pipedit.distributed.shard_plan); None when one rank holds
    the whole sequence (a single-rank strategy such as "local")."""

    def __init__(self, strategy: AttentionStrategy, shards: SequenceShards | None) -> None:
        self.strategy = strategy
        self.shards = shards
        # Strategies that move heads by all-to-all expose the call in two halves (usp.py).
        self.overlapped = hasattr(strategy, "start_sequence_to_heads")

    def shard_sizes(self, local_tokens: int) -> Sequence[int]:
        return self.shards.sizes if self.shards is not None else (local_tokens,)

    def start(self, x: torch.Tensor | None) -> Any:
        """This rank's video q, k or v [B, S_local, H, D] handed over as soon as it is projected;
        pass what it returns to `attend` in q, k, v order (None stays None: cross-attention)."""
        if x is None or not self.overlapped:
            return x
        return self.strategy.start_sequence_to_heads(x, self.shards.sizes)

    def attend(self, started: Sequence[Any], *, num_heads: int, joint: JointTokens | None = None,
               layout: TokenLayout | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The strategy's attention over the started q, k, v (see AttentionStrategy): this rank's
        video output [B, S_local, H, D] and the text output when `joint` has text queries."""
        if self.overlapped:
            q, k, v = (None if pending is None else pending.wait() for pending in started)
            return self.strategy.attend_heads(q, k, v, num_heads=num_heads, shard_sizes=self.shards.sizes,
                                              joint=joint, layout=layout)
        q, k, v = started
        return self.strategy(q, k, v, shard_sizes=self.shard_sizes(q.shape[1]), joint=joint, layout=layout)

    def attend_locally(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attention that needs no communication: this rank's video queries [B, S_local, H, D]
        over keys every rank holds whole (replicated text), every head, the strategy's kernel."""
        return self.strategy.kernel(q, k, v, key_mask)
