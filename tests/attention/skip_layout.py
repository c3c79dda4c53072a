"""A toy sparse TokenLayout for strategy tests: Skiparse-style skips with padding.

Tokens are zero-padded to a multiple of n*n; token j joins sub-sequence j % n ("single") or
(j // n) % n ("group"); sub-sequences are stacked on the batch axis in (sub-sequence, batch)
order; padded keys are masked out.
"""

from __future__ import annotations

import torch

from pipedit.attention.base import TokenLayout


class SkipLayout(TokenLayout):
    def __init__(self, n: int, group: bool = False) -> None:
        self.n, self.group = n, group

    def _order(self, seq_len: int, device) -> tuple[int, torch.Tensor]:
        block = self.n * self.n
        padded = -(-max(seq_len, 1) // block) * block
        index = torch.arange(padded, device=device)
        sub = (index // self.n) % self.n if self.group else index % self.n
        return padded, torch.argsort(sub, stable=True)

    def regroup(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, heads, dim = x.shape
        padded, order = self._order(seq, x.device)
        full = torch.cat([x, x.new_zeros(batch, padded - seq, heads, dim)], dim=1)[:, order]
        return full.view(batch, self.n, padded // self.n, heads, dim).transpose(0, 1).reshape(self.n * batch, padded // self.n, heads, dim)

    def ungroup(self, x: torch.Tensor, seq_len: int) -> torch.Tensor:
        padded, order = self._order(seq_len, x.device)
        _, sub_len, heads, dim = x.shape
        batch = x.shape[0] // self.n
        stacked = x.view(self.n, batch, sub_len, heads, dim).transpose(0, 1).reshape(batch, padded, heads, dim)
        out = torch.empty_like(stacked)
        out[:, order] = stacked
        return out[:, :seq_len]

    def key_mask(self, batch: int, seq_len: int, device) -> torch.Tensor:
        padded, order = self._order(seq_len, device)
        valid = (torch.arange(padded, device=device) < seq_len)[order].view(self.n, 1, padded // self.n)
        return valid.expand(self.n, batch, padded // self.n).reshape(-1, padded // self.n)

    def dense_mask(self, seq_len: int) -> torch.Tensor:
        """[S, S] bool: which keys each query attends (for checking the layout itself)."""
        index = torch.arange(seq_len)
        sub = (index // self.n) % self.n if self.group else index % self.n
        return sub[:, None] == sub[None, :]
