"""Sequence parallelism for diffusers' HunyuanVideoTransformer3DModel, applied from outside.

Video tokens are sharded along the sequence (shard plan hooks on x_embedder, rope and proj_out);
text tokens stay replicated on every rank, so the model's own text-padding mask stays valid. A
custom attention processor hands video and text Q/K/V to a pipedit AttentionStrategy, which
attends over [all video tokens ; text tokens] as the single-device model does.

Hazard: the processor depends on diffusers' Attention attribute names (to_q, add_q_proj,
norm_added_q, to_out, to_add_out) and on the processor call signature (Attention.forward drops
keyword arguments __call__ does not declare). Re-check on every diffusers upgrade (it is pinned).
"""

from __future__ import annotations

import torch
from diffusers.models.embeddings import apply_rotary_emb

from pipedit.distributed.shard_plan import SequenceShardPlan, SequenceShards, apply_shard_plan

SHARD_PLAN = SequenceShardPlan(
    split={"x_embedder": 1, "rope": 0},  # patch tokens [B, S, C]; rope (cos, sin) each [S, D]
    gather={"proj_out": 1},  # final per-token projection [B, S, C'] before unpatchify
)
# Blocks whose attention mixes video tokens; the token refiner's attention is text-only.
_SEQUENCE_BLOCKS = ("transformer_blocks.", "single_transformer_blocks.")


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.unflatten(2, (heads, -1))


def _norm(norm, x: torch.Tensor) -> torch.Tensor:
    return x if norm is None else norm(x)


class SequenceParallelAttnProcessor:
    def __init__(self, strategy, shards: SequenceShards):
        self.strategy = strategy
        self.shards = shards

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 image_rotary_emb=None):
        if encoder_hidden_states is None:
            raise RuntimeError("HunyuanVideo sequence-parallel attention expects text tokens")
        text_len = encoder_hidden_states.shape[1]
        if attn.add_q_proj is None:  # single-stream block: one projection for video and text
            both = torch.cat([hidden_states, encoder_hidden_states], dim=1)
            q, k, v = (_heads(proj(both), attn.heads) for proj in (attn.to_q, attn.to_k, attn.to_v))
            q, k = _norm(attn.norm_q, q), _norm(attn.norm_k, k)
            (q, text_q), (k, text_k), (v, text_v) = (
                (t[:, :-text_len], t[:, -text_len:]) for t in (q, k, v)
            )
        else:  # dual-stream block: separate projections and norms for the text stream
            q, k, v = (_heads(proj(hidden_states), attn.heads) for proj in (attn.to_q, attn.to_k, attn.to_v))
            q, k = _norm(attn.norm_q, q), _norm(attn.norm_k, k)
            text_q, text_k, text_v = (
                _heads(proj(encoder_hidden_states), attn.heads)
                for proj in (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj)
            )
            text_q, text_k = _norm(attn.norm_added_q, text_q), _norm(attn.norm_added_k, text_k)
        q = apply_rotary_emb(q, image_rotary_emb, sequence_dim=1)
        k = apply_rotary_emb(k, image_rotary_emb, sequence_dim=1)
        # The model's mask is [B, 1, 1, S_local + L]: video keys are always valid, text keys padded.
        text_mask = attention_mask[:, 0, 0, -text_len:] if attention_mask is not None else None
        out, text_out = self.strategy(
            q, k, v, shard_sizes=self.shards.sizes,
            joint_q=text_q, joint_k=text_k, joint_v=text_v, joint_kv_mask=text_mask,
        )
        out, text_out = out.flatten(2, 3).to(q.dtype), text_out.flatten(2, 3).to(q.dtype)
        if getattr(attn, "to_out", None) is not None:
            out = attn.to_out[1](attn.to_out[0](out))
        if getattr(attn, "to_add_out", None) is not None:
            text_out = attn.to_add_out(text_out)
        return out, text_out


def enable_sequence_parallel(transformer, ctx, strategy) -> int:
    """Shards the video sequence across ctx's ranks and routes attention through `strategy`.
    Returns the number of attention calls per forward that go through the strategy."""
    shards = apply_shard_plan(transformer, SHARD_PLAN, ctx)
    processors = dict(transformer.attn_processors)
    routed = [name for name in processors if name.startswith(_SEQUENCE_BLOCKS)]
    for name in routed:
        processors[name] = SequenceParallelAttnProcessor(strategy, shards)
    transformer.set_attn_processor(processors)
    return len(routed)
