"""Skiparse sparse attention layouts (Open-Sora-Plan v1.3), as pure functions over full-sequence
[B, S, H, D] tensors, so that a sequence-parallel processor can apply them after its all-to-all.

The sequence is zero-padded to a multiple of n*n and split into n sub-sequences that attend only
within themselves, stacked on the batch axis in (k, b) order:
- single skip: token j goes to sub-sequence j mod n;
- group skip: token j goes to sub-sequence (j div n) mod n (runs of n tokens, every n*n).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Additive bias of the padded keys, as the official model builds it (not -inf: a padded key
# still gets exp(-9980) ~ 0 weight).
PAD_KEY_BIAS = -9980.0
# Layers 2..29 are sparse whatever num_layers is (hard-coded by index in the official model).
FIRST_SPARSE_LAYER, END_SPARSE_LAYER = 2, 30


@dataclass(frozen=True)
class SparseLayout:
    n: int
    group: bool

    def padded_length(self, seq_len: int) -> int:
        block = self.n * self.n
        return -(-seq_len // block) * block

    def regroup(self, x: torch.Tensor) -> torch.Tensor:
        """[B, S, ...] -> [n*B, S'/n, ...] with S' the padded length; batch index k*B + b."""
        batch, seq = x.shape[:2]
        rest = x.shape[2:]
        padded = self.padded_length(seq)
        if padded != seq:
            x = F.pad(x, (0, 0) * len(rest) + (0, padded - seq))
        n = self.n
        if self.group:
            # j = (i * n + m) * n + k  ->  sub-sequence m, position i * n + k
            x = x.reshape(batch, padded // (n * n), n, n, *rest).transpose(1, 2).transpose(0, 1)
        else:
            # j = g * n + k  ->  sub-sequence k, position g
            x = x.reshape(batch, padded // n, n, *rest).movedim(2, 0)
        return x.reshape(n * batch, padded // n, *rest)

    def ungroup(self, y: torch.Tensor, seq_len: int) -> torch.Tensor:
        """Inverse of regroup: [n*B, S'/n, ...] -> [B, seq_len, ...] (padding cut off)."""
        n = self.n
        batch = y.shape[0] // n
        padded = y.shape[1] * n
        rest = y.shape[2:]
        y = y.reshape(n, batch, *y.shape[1:])
        if self.group:
            y = y.reshape(n, batch, padded // (n * n), n, *rest).transpose(0, 1).transpose(1, 2)
        else:
            y = y.movedim(0, 2)
        return y.reshape(batch, padded, *rest)[:, :seq_len]

    def key_bias(self, bias: torch.Tensor | None, batch: int, seq_len: int, dtype, device) -> torch.Tensor:
        """Additive key bias [n*B, S'/n] for the regrouped keys: the given per-token bias [B, S]
        (None: zeros) with PAD_KEY_BIAS on the padding."""
        if bias is None:
            bias = torch.zeros(batch, seq_len, dtype=dtype, device=device)
        padded = self.padded_length(seq_len)
        bias = F.pad(bias.to(dtype), (0, padded - seq_len), value=PAD_KEY_BIAS)
        return self.regroup(bias.unsqueeze(-1)).squeeze(-1)


def layer_layout(index: int, sparse1d: bool, sparse_n: int) -> SparseLayout | None:
    """The layout of transformer block `index`; None for dense blocks."""
    if not sparse1d or not FIRST_SPARSE_LAYER <= index < END_SPARSE_LAYER:
        return None
    return SparseLayout(sparse_n, group=index % 2 == 1)
