"""Sequence parallelism for diffusers' WanTransformer3DModel, applied from outside the model.

Video tokens are sharded along the flattened (t, h, w) sequence: the RoPE tables (the `rope`
module's cos and sin, [1, S, 1, D]) and the first block's input are cut, the final per-token
projection is all-gathered. Wan2.2 TI2V's per-token timestep embeddings (`expand_timesteps`:
temb [B, S, D], timestep_proj [B, S, 6D]) are cut alike, so the output norm's shift and scale
match the local tokens. Any rank count works (uneven token and head shards).

A processor replaces both attentions of every block:
- self-attention: Q and K get the RMSNorm across heads (per token, so local tokens hold every
  head before the all-to-all) and the rotary embedding of their own positions; each projection's
  all-to-all starts as soon as it is computed (PipeSP overlap) and the strategy attends.
- cross-attention needs no communication: a video query attends the replicated text (and, for
  Wan2.1 image-to-video, the 257 replicated CLIP image tokens, attended separately and added),
  so every rank attends its own video tokens with every head through the strategy's kernel.
  Aco helpers therefore serve self-attention only.

Hazard: the processor depends on diffusers' WanAttention attribute names (to_q/to_k/to_v, norm_q,
norm_k, add_k_proj, add_v_proj, norm_added_k, to_out) and on WanAttnProcessor's contract (the
image context is the first `len - 512` text tokens; rotary_emb (cos, sin) with each pair's cos at
even and sin at odd channels). Re-check on every diffusers upgrade (it is pinned).
"""

from __future__ import annotations

import torch

from pipedit.attention.dispatch import SequenceParallelProcessor
from pipedit.distributed.shard_plan import SequenceShardPlan, SequenceShards, apply_shard_plan, split_sequence

SHARD_PLAN = SequenceShardPlan(
    split={"rope": 1},  # (cos, sin), each [1, S, 1, head_dim]
    split_input={"blocks.0": 1},  # patch tokens [B, S, C], flattened inline by the model's forward
    gather={"proj_out": 1},  # per-token projection [B, S, p*C] before unpatchify
)
TEXT_CONTEXT = 512  # UMT5 tokens; WanAttnProcessor treats any tokens before them as image context


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's rotary embedding on [B, S, H, D]: channel pairs (2i, 2i+1) rotated by the angle
    whose cosine sits at channel 2i of `cos` and sine at channel 2i+1 of `sin` (same products as
    diffusers, so the same bits)."""
    pairs = x.unflatten(-1, (-1, 2))
    real, imag = pairs[..., 0], pairs[..., 1]
    c, s = cos[..., 0::2], sin[..., 1::2]
    return torch.stack((real * c - imag * s, real * s + imag * c), dim=-1).flatten(-2).type_as(x)


class WanSequenceParallelProcessor(SequenceParallelProcessor):
    """processor(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb), the
    WanAttention processor contract, over a sequence shard (the strategy call: the shared dispatch)."""

    @staticmethod
    def _heads(attn, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(2, (attn.heads, -1))

    def _self_attention(self, attn, x: torch.Tensor, rotary) -> torch.Tensor:
        started = []
        for proj, norm in ((attn.to_q, attn.norm_q), (attn.to_k, attn.norm_k), (attn.to_v, None)):
            projected = self._heads(attn, proj(x) if norm is None else norm(proj(x)))
            if norm is not None and rotary is not None:
                projected = rotate(projected, *rotary)
            started.append(self.start(projected))
        return self.attend(started, num_heads=attn.heads)[0]

    def _cross_attention(self, attn, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        image = None
        if attn.add_k_proj is not None:  # Wan2.1 image-to-video: image tokens, then the text
            image, context = context[:, : context.shape[1] - TEXT_CONTEXT], context[:, -TEXT_CONTEXT:]
        q = self._heads(attn, attn.norm_q(attn.to_q(x)))
        k = self._heads(attn, attn.norm_k(attn.to_k(context)))
        out = self.attend_locally(q, k, self._heads(attn, attn.to_v(context))).type_as(q)
        if image is not None:
            image_k = self._heads(attn, attn.norm_added_k(attn.add_k_proj(image)))
            image_out = self.attend_locally(q, image_k, self._heads(attn, attn.add_v_proj(image)))
            out = image_out.type_as(q) + out  # diffusers adds the text part to the image part's flat form
        return out

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        if getattr(attn, "fused_projections", False):
            raise RuntimeError("pipedit's Wan sequence parallelism needs unfused Q/K/V projections "
                               "(do not call fuse_qkv_projections)")
        if attention_mask is not None:
            raise RuntimeError("Wan attention takes no mask; pipedit's processor does not implement one")
        if encoder_hidden_states is None:
            out = self._self_attention(attn, hidden_states, rotary_emb)
        else:
            out = self._cross_attention(attn, hidden_states, encoder_hidden_states)
        out = out.flatten(2).type_as(hidden_states)
        return attn.to_out[1](attn.to_out[0](out))


def _split_token_embeddings(ctx, shards: SequenceShards):
    """Forward hook on condition_embedder: with per-token timesteps (temb [B, S, D]) cut temb and
    timestep_proj to this rank's tokens; per-sample ones (temb [B, D]) pass unchanged."""

    def hook(module, args, output):
        temb, timestep_proj, *rest = output
        if temb.ndim != 3:
            return output
        return (split_sequence(temb, 1, ctx, shards), split_sequence(timestep_proj, 1, ctx, shards), *rest)

    return hook


def enable_sequence_parallel(transformer, ctx, strategy) -> int:
    """Shards the video sequence over ctx's ranks and routes every self-attention through
    `strategy` (cross-attention runs locally, see the module docstring); returns the attention
    calls per forward that go through the strategy."""
    shards = apply_shard_plan(transformer, SHARD_PLAN, ctx)
    transformer.condition_embedder.register_forward_hook(_split_token_embeddings(ctx, shards))
    for block in transformer.blocks:
        for attn in (block.attn1, block.attn2):
            attn.processor = WanSequenceParallelProcessor(strategy, shards)
    return len(transformer.blocks)  # one self-attention per block
