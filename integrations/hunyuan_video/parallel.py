"""Sequence parallelism for diffusers' HunyuanVideoTransformer3DModel, applied from outside.

Video tokens are sharded along the sequence (shard plan hooks on x_embedder, rope and proj_out);
text tokens stay replicated on every rank, so the model's own text-padding mask stays valid. A
custom attention processor projects video and text Q/K/V and hands them, through the shared
dispatch (pipedit.attention.dispatch), to a pipedit AttentionStrategy, which attends over
[all video tokens ; text tokens] as the single-device model does.

Hazard: the processor depends on diffusers' Attention attribute names (to_q, add_q_proj,
norm_added_q, to_out, to_add_out) and on the processor call signature (Attention.forward drops
keyword arguments __call__ does not declare). Re-check on every diffusers upgrade (it is pinned).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from diffusers.models.embeddings import apply_rotary_emb

from pipedit.attention.base import JointTokens
from pipedit.attention.dispatch import SequenceParallelProcessor
from pipedit.distributed.shard_plan import SequenceShardPlan, SequenceShards, apply_shard_plan

SHARD_PLAN = SequenceShardPlan(
    split={"x_embedder": 1, "rope": 0},  # patch tokens [B, S, C]; rope (cos, sin) each [S, D]
    gather={"proj_out": 1},  # final per-token projection [B, S, C'] before unpatchify
)
# Blocks whose attention mixes video tokens; the token refiner's attention is text-only.
_SEQUENCE_BLOCKS = ("transformer_blocks.", "single_transformer_blocks.")


@dataclass
class TextKeys:
    """Shared by the adapter and its processors: whether the current request's text tokens hold
    padding. The model always builds a key mask; when the adapter has dropped the padded tokens
    (`padded` False) the processors ignore that all-true mask, so the unmasked (fastest) attention
    kernels run. Set per request on the host, so the hot path never reads the mask's values."""

    padded: bool = True


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.unflatten(2, (heads, -1))


def _norm(norm, x: torch.Tensor) -> torch.Tensor:
    return x if norm is None else norm(x)


class SequenceParallelAttnProcessor(SequenceParallelProcessor):
    """HunyuanVideo's projections (dual-stream: separate text projections; single-stream: one
    projection of [video ; text]), norms and rope; the strategy call is the shared dispatch's.
    Each video projection is started as soon as it is computed, so the next projections (and the
    text stream's) overlap a Ulysses-style strategy's all-to-all; the math is the same either way."""

    def __init__(self, strategy, shards: SequenceShards | None, text_keys: TextKeys | None = None):
        super().__init__(strategy, shards)
        self.text_keys = text_keys or TextKeys()

    def _video_and_text(self, attn, hidden_states, encoder_hidden_states, rotary):
        """Per projection: the video part (started) and the text part."""
        text_len = encoder_hidden_states.shape[1]
        single_stream = attn.add_q_proj is None  # one projection for video and text
        source = torch.cat([hidden_states, encoder_hidden_states], dim=1) if single_stream else hidden_states
        started, text = [], []
        for proj, norm, rope in ((attn.to_q, attn.norm_q, rotary), (attn.to_k, attn.norm_k, rotary), (attn.to_v, None, None)):
            projected = _norm(norm, _heads(proj(source), attn.heads))
            video = projected[:, :-text_len] if single_stream else projected
            if rope is not None:
                video = apply_rotary_emb(video, rope, sequence_dim=1)
            started.append(self.start(video))
            if single_stream:
                text.append(projected[:, -text_len:])
        if not single_stream:  # computed while the video all-to-alls are in flight
            for proj, norm in ((attn.add_q_proj, attn.norm_added_q), (attn.add_k_proj, attn.norm_added_k),
                               (attn.add_v_proj, None)):
                text.append(_norm(norm, _heads(proj(encoder_hidden_states), attn.heads)))
        return started, text

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 image_rotary_emb=None):
        if encoder_hidden_states is None:
            raise RuntimeError("HunyuanVideo sequence-parallel attention expects text tokens")
        text_len = encoder_hidden_states.shape[1]
        started, (text_q, text_k, text_v) = self._video_and_text(
            attn, hidden_states, encoder_hidden_states, image_rotary_emb
        )
        # The model's mask ends in the text keys' validity: HunyuanVideo's is [B, 1, 1, S_local + L]
        # (video keys always valid), HunyuanVideo 1.5's [B, L] (its text and image tokens only).
        mask = attention_mask.flatten(1)[:, -text_len:] if attention_mask is not None and self.text_keys.padded else None
        out, text_out = self.attend(started, num_heads=attn.heads, joint=JointTokens(text_q, text_k, text_v, mask))
        dtype = text_q.dtype
        out, text_out = out.flatten(2, 3).to(dtype), text_out.flatten(2, 3).to(dtype)
        if getattr(attn, "to_out", None) is not None:
            out = attn.to_out[1](attn.to_out[0](out))
        if getattr(attn, "to_add_out", None) is not None:
            text_out = attn.to_add_out(text_out)
        return out, text_out


def install_processors(transformer, strategy, shards: SequenceShards | None, text_keys: TextKeys | None) -> int:
    """Routes every video-mixing attention through `strategy`; returns how many calls per forward."""
    processors = dict(transformer.attn_processors)
    routed = [name for name in processors if name.startswith(_SEQUENCE_BLOCKS)]
    for name in routed:
        processors[name] = SequenceParallelAttnProcessor(strategy, shards, text_keys)
    transformer.set_attn_processor(processors)
    return len(routed)


def enable_sequence_parallel(transformer, ctx, strategy, text_keys: TextKeys | None = None) -> int:
    """Shards the video sequence across ctx's ranks and routes attention through `strategy`.
    Returns the number of attention calls per forward that go through the strategy."""
    return install_processors(transformer, strategy, apply_shard_plan(transformer, SHARD_PLAN, ctx), text_keys)
