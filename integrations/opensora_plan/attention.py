"""Attention of the Open-Sora-Plan v1.3 transformer blocks.

OpenSoraAttention holds the projections under the official key names (to_q, to_k, to_v,
to_out.0) and calls its replaceable `processor`:
    processor(attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary=None, layout=None)
- self-attention: encoder_hidden_states None, attention_mask the additive key bias [B, S] of
  the video tokens (None: none), rotary (cos, sin) [S, head_dim], layout a SparseLayout or None;
- cross-attention: encoder_hidden_states the projected text [B, L, D], attention_mask its
  additive key bias [B, L]; no rotary. In sparse layers the official model regroups the queries
  and repeats K/V n times, which equals dense cross-attention, so `layout` needs no handling here.
A sequence-parallel processor replaces the default one from outside the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .rope import apply_rope
from .skiparse import SparseLayout


class OpenSoraAttention(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int, cross_dim: int | None = None, bias: bool = True):
        super().__init__()
        self.heads = heads
        self.head_dim = head_dim
        inner = heads * head_dim
        kv_dim = cross_dim if cross_dim is not None else dim
        self.is_cross = cross_dim is not None
        self.to_q = nn.Linear(dim, inner, bias=bias)
        self.to_k = nn.Linear(kv_dim, inner, bias=bias)
        self.to_v = nn.Linear(kv_dim, inner, bias=bias)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim, bias=True), nn.Dropout(0.0)])
        self.processor = DefaultAttnProcessor()

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary=None, layout=None):
        return self.processor(self, hidden_states, encoder_hidden_states=encoder_hidden_states,
                              attention_mask=attention_mask, rotary=rotary, layout=layout)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_bias: torch.Tensor | None) -> torch.Tensor:
    """q [B, Sq, H, D], k/v [B, Sk, H, D], key_bias [B, Sk] additive or None -> [B, Sq, H, D]."""
    mask = None if key_bias is None else key_bias[:, None, None, :].to(q.dtype)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return out.transpose(1, 2)


def self_attention_core(q, k, v, key_bias, layout: SparseLayout | None) -> torch.Tensor:
    """Full-sequence self-attention after RoPE, dense or Skiparse: [B, S, H, D] each, with any
    number of heads (a Ulysses rank calls it with its local heads)."""
    if layout is None:
        return sdpa(q, k, v, key_bias)
    batch, seq = q.shape[:2]
    bias = layout.key_bias(key_bias, batch, seq, q.dtype, q.device)
    out = sdpa(layout.regroup(q), layout.regroup(k), layout.regroup(v), bias)
    return layout.ungroup(out, seq)


class DefaultAttnProcessor:
    """Single-device math of the official OpenSoraAttnProcessor2_0."""

    def __call__(self, attn: OpenSoraAttention, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary=None, layout=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, attn.head_dim))
        k = attn.to_k(context).unflatten(-1, (attn.heads, attn.head_dim))
        v = attn.to_v(context).unflatten(-1, (attn.heads, attn.head_dim))
        if encoder_hidden_states is None:
            if rotary is not None:
                q, k = apply_rope(q, *rotary), apply_rope(k, *rotary)
            out = self_attention_core(q, k, v, attention_mask, layout)
        else:
            out = sdpa(q, k, v, attention_mask)
        return attn.to_out[0](out.flatten(2))
