"""Sequence parallelism for diffusers' LTX2VideoTransformer3DModel, applied from outside the model.

The video tokens are sharded along the packed (f, h, w) sequence: the video RoPE tables (the
`rope` and `cross_attn_rope` outputs), the first projection's output and, for image-to-video, the
per-token timesteps are cut; the final projection is all-gathered. The sound stays whole on every
rank: its tokens (about 25 a second against LTX-2's thousands of video tokens: 126 against 6,144
for 121 frames at 768x512) cost about as much as one video frame's, so every rank computing them
is cheaper than an all-to-all for each of its attentions and keeps the audio path as it is.

What each of a block's six attentions needs:
- video self-attention (attn1): through the strategy (Ulysses, Ring, USP, PipeSP; Aco), with
  LTX-2.3's per-head gates on the local tokens and STG's value shortcut (no attention at all when
  every sample is perturbed, the same decision on every rank);
- video-text (attn2), audio-to-video (video queries over the whole sound), audio self-attention
  and audio-text: local, diffusers' own processor on this rank's video tokens or the whole sound;
- video-to-audio (the sound's queries over every video token): each rank attends its own video
  keys and the partial results (out, log-sum-exp) are all-gathered and merged, a message the size
  of the sound's tokens, not the video's.

Hazard: the processors depend on diffusers' LTX2Attention attribute names (to_q/to_k/to_v,
norm_q/norm_k, to_gate_logits, rope_type, to_out) and on the perturbed processor's contract
(perturbation_mask, all_perturbed). Re-check on every diffusers upgrade (it is pinned).
"""

from __future__ import annotations

import torch
from diffusers.models.transformers.transformer_ltx2 import apply_interleaved_rotary_emb, apply_split_rotary_emb

from pipedit.attention.dispatch import SequenceParallelProcessor
from pipedit.attention.kernels import explicit_attention_lse, merge_partials
from pipedit.distributed.collectives import all_gather_async
from pipedit.distributed.shard_plan import SequenceShardPlan, apply_shard_plan, split_sequence


def _plan(rope_type: str) -> SequenceShardPlan:
    # Video RoPE (cos, sin): [B, S, D] interleaved, [B, H, S, D/2] split.
    rope_dim = 2 if rope_type == "split" else 1
    return SequenceShardPlan(split={"rope": rope_dim, "cross_attn_rope": rope_dim, "proj_in": 1},
                             gather={"proj_out": 1})


def _rotate(attn, x: torch.Tensor, rotary) -> torch.Tensor:
    if rotary is None:
        return x
    rotate = apply_split_rotary_emb if attn.rope_type == "split" else apply_interleaved_rotary_emb
    return rotate(x, rotary)


def _gated(attn, gate_input: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """LTX-2.3's per-head output gates (2 sigmoid(logits)); out [B, S, H, D]."""
    if attn.to_gate_logits is None:
        return out
    return out * (2.0 * torch.sigmoid(attn.to_gate_logits(gate_input))).unsqueeze(-1)


class VideoSelfAttention(SequenceParallelProcessor):
    """attn1 over this rank's video tokens through the strategy."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 query_rotary_emb=None, key_rotary_emb=None, perturbation_mask=None, all_perturbed=None):
        if attention_mask is not None:
            raise RuntimeError("pipedit's LTX-2 sequence parallelism takes no video self-attention mask (IC-LoRA)")
        heads = attn.heads
        value = attn.to_v(hidden_states)
        if all_perturbed is None:
            all_perturbed = bool(torch.all(perturbation_mask == 0)) if perturbation_mask is not None else False
        if all_perturbed:  # STG: the values stand in for the attention, nothing is exchanged
            out = value.unflatten(2, (heads, -1))
        else:
            q = _rotate(attn, attn.norm_q(attn.to_q(hidden_states)), query_rotary_emb)
            started = [self.start(q.unflatten(2, (heads, -1)))]
            k = _rotate(attn, attn.norm_k(attn.to_k(hidden_states)), key_rotary_emb or query_rotary_emb)
            started.append(self.start(k.unflatten(2, (heads, -1))))
            started.append(self.start(value.unflatten(2, (heads, -1))))
            out = self.attend(started, num_heads=heads)[0].to(q.dtype)
            if perturbation_mask is not None:
                out = torch.lerp(value, out.flatten(2), perturbation_mask).unflatten(2, (heads, -1))
        out = _gated(attn, hidden_states, out).flatten(2)
        return attn.to_out[1](attn.to_out[0](out))


class AudioFromVideo:
    """video_to_audio_attn: the whole sound's queries over the video keys every rank holds a
    shard of; partial attentions merged by log-sum-exp (in rank order, the same on every rank)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 query_rotary_emb=None, key_rotary_emb=None, perturbation_mask=None, all_perturbed=None):
        if attention_mask is not None:
            raise RuntimeError("pipedit's LTX-2 sequence parallelism takes no video-to-audio mask")
        heads = attn.heads
        q = _rotate(attn, attn.norm_q(attn.to_q(hidden_states)), query_rotary_emb)
        k = _rotate(attn, attn.norm_k(attn.to_k(encoder_hidden_states)), key_rotary_emb or query_rotary_emb)
        v = attn.to_v(encoder_hidden_states)
        heads_first = [x.unflatten(2, (heads, -1)).transpose(1, 2) for x in (q, k, v)]  # [B, H, N, D]
        out, lse = explicit_attention_lse(*heads_first, None)
        outs = all_gather_async(out.contiguous(), self.ctx.sp_group, self.ctx.state)
        lses = all_gather_async(lse.contiguous(), self.ctx.sp_group, self.ctx.state)
        merged = None
        for part in zip(outs.wait(), lses.wait()):
            merged = part if merged is None else merge_partials(*merged, *part)
        out = merged[0].transpose(1, 2).to(q.dtype)  # [B, N, H, D]
        out = _gated(attn, hidden_states, out).flatten(2)
        return attn.to_out[1](attn.to_out[0](out))


def _split_token_timesteps(ctx, shards):
    """Pre-hook: image-to-video's per-token video timesteps [B, S] cut to this rank's tokens (the
    time embedding and the modulation follow them); per-sample ones [B] pass unchanged."""

    def hook(module, args, kwargs):
        timestep = kwargs.get("timestep")
        if timestep is not None and timestep.ndim == 2:
            kwargs["timestep"] = split_sequence(timestep, 1, ctx, shards)
        return args, kwargs

    return hook


def enable_sequence_parallel(transformer, ctx, strategy) -> int:
    """Shards the video tokens over ctx's ranks (see the module docstring); returns the attention
    calls per forward that go through the strategy (one video self-attention per block)."""
    shards = apply_shard_plan(transformer, _plan(transformer.config.rope_type), ctx)
    transformer.register_forward_pre_hook(_split_token_timesteps(ctx, shards), with_kwargs=True)
    for block in transformer.transformer_blocks:
        block.attn1.processor = VideoSelfAttention(strategy, shards)
        block.video_to_audio_attn.processor = AudioFromVideo(ctx)
    return len(transformer.transformer_blocks)
