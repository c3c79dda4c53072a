"""Sequence parallelism for the OpenSoraPlan v1.3 transformer, applied from outside the model.

Video tokens are sharded along the flattened (t, h, w) sequence by a shard plan: the patch
embedding's tokens and the RoPE tables are split, the final projection is all-gathered. Any rank
count works (uneven token shards; heads split unevenly by the strategy), unlike upstream, which
needs heads % sp == 0 and T % sp == 0.

A processor replaces every block's attention processor (self- and cross-attention) and hands
Q/K/V to a pipedit AttentionStrategy:
- self-attention: RoPE is applied to the local tokens (it is per token), and each projection's
  all-to-all starts as soon as that projection is computed, so it overlaps the next projection
  (the paper's Q/K/V overlap for OpenSoraPlan). Skiparse runs after the all-to-all on the full
  sequence of the local heads, as a TokenLayout (`VideoKeys`).
- cross-attention needs no communication at all: a video query attends to the text alone, and
  the text is replicated (every rank projects all text tokens), so each rank attends its own video
  tokens with every head, through the strategy's kernel. Upstream all-to-alls q, k, v and the
  output here too; skipping that removes a third of the sequence-parallel traffic. Aco helpers
  therefore serve self-attention only.
Masks: the model's additive biases (0 valid, -10000 masked; -9980 on Skiparse padding) become
boolean key masks; a masked key's weight exp(-1e4) is exactly 0 in fp32/bf16 either way.
"""

from __future__ import annotations

import torch

from pipedit.attention.base import TokenLayout
from pipedit.attention.dispatch import SequenceParallelProcessor
from pipedit.distributed.shard_plan import SequenceShardPlan, apply_shard_plan
from pipedit.errors import UserInputError

from .rope import apply_rope
from .skiparse import SparseLayout
from .transformer import MASK_BIAS

SHARD_PLAN = SequenceShardPlan(
    split={"pos_embed": 1, "rope": 0},  # patch tokens [B, S, D]; rope (cos, sin) each [S, head_dim]
    gather={"proj_out": 1},  # per-token projection [B, S, p*p*C] before unpatchify
)


def _valid(bias: torch.Tensor | None) -> torch.Tensor | None:
    """Additive key bias [B, N] -> bool key mask (None stays None)."""
    return None if bias is None else bias > MASK_BIAS / 2


class VideoKeys(TokenLayout):
    """Self-attention over the full video sequence: Skiparse regrouping (or none, for dense
    layers) plus the valid video keys (None: all valid)."""

    def __init__(self, sparse: SparseLayout | None, valid: torch.Tensor | None) -> None:
        self.sparse = sparse
        self.valid = valid  # bool [B, S] over the full sequence, or None

    def regroup(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.sparse is None else self.sparse.regroup(x)

    def ungroup(self, x: torch.Tensor, seq_len: int) -> torch.Tensor:
        return x if self.sparse is None else self.sparse.ungroup(x, seq_len)

    def key_mask(self, batch: int, seq_len: int, device: torch.device) -> torch.Tensor | None:
        if self.sparse is None:
            return self.valid
        if self.valid is None and self.sparse.padded_length(seq_len) == seq_len:
            return None  # no padding, no masked token: the unmasked kernel
        valid = self.valid if self.valid is not None else torch.ones(batch, seq_len, dtype=torch.bool, device=device)
        # regroup pads with zeros: padded keys come out invalid.
        return self.sparse.regroup(valid.to(torch.uint8).unsqueeze(-1)).squeeze(-1) > 0


class OpenSoraSequenceParallelProcessor(SequenceParallelProcessor):
    """processor(attn, hidden_states, encoder_hidden_states, attention_mask, rotary, layout),
    the OpenSoraAttention processor contract, over a sequence shard (the strategy call: the shared
    dispatch)."""

    def _project(self, proj, x: torch.Tensor, attn) -> torch.Tensor:
        return proj(x).unflatten(-1, (attn.heads, attn.head_dim))

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary=None,
                 layout=None):
        if encoder_hidden_states is None:
            started = []
            for proj, rope in ((attn.to_q, True), (attn.to_k, True), (attn.to_v, False)):
                x = self._project(proj, hidden_states, attn)
                if rope and rotary is not None:
                    x = apply_rope(x, *rotary)
                started.append(self.start(x))
            valid = _valid(attention_mask)
            keys = None if layout is None and valid is None else VideoKeys(layout, valid)
            out = self.attend(started, num_heads=attn.heads, layout=keys)[0]
        else:
            q = self._project(attn.to_q, hidden_states, attn)
            text_k = self._project(attn.to_k, encoder_hidden_states, attn)
            text_v = self._project(attn.to_v, encoder_hidden_states, attn)
            out = self.attend_locally(q, text_k, text_v, _valid(attention_mask))
        return attn.to_out[0](out.flatten(2).to(hidden_states.dtype))


def enable_sequence_parallel(transformer, ctx, strategy) -> int:
    """Shards the video sequence over ctx's ranks and routes every self-attention through
    `strategy` (cross-attention runs locally, see the module docstring); returns the attention
    calls per forward that go through the strategy."""
    sparse = any(block.layout is not None for block in transformer.transformer_blocks)
    if sparse and ctx.ring_degree > 1:
        raise UserInputError(
            f"OpenSoraPlan's Skiparse layers attend over the whole sequence of a head, which ring attention "
            f"splits: use --ulysses {ctx.world_size} --ring 1 (any rank count works, heads split unevenly)"
        )
    shards = apply_shard_plan(transformer, SHARD_PLAN, ctx)
    for block in transformer.transformer_blocks:
        for attn in (block.attn1, block.attn2):
            attn.processor = OpenSoraSequenceParallelProcessor(strategy, shards)
    return len(transformer.transformer_blocks)  # one self-attention per block
