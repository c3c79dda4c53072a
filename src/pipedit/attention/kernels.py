"""Single-device attention kernels in the [B, S, H, D] layout.

`AttentionKernel` is the reference path (torch SDPA with a boolean key mask, as diffusers'
HunyuanVideo calls it) with optional xformers / flash-attn picked by probe on CUDA.
`LseKernel` returns (out, log-sum-exp) per block for ring attention; `merge_partials`
combines blocks with online softmax in fp32.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "sdpa", "xformers", "flash")
_HALF = (torch.float16, torch.bfloat16)
_log = logging.getLogger(__name__)


class AttentionKernel:
    """softmax(q k^T / sqrt(D)) v over keys where key_mask [B, N] is True (None: all keys).

    Backend "auto" uses flash-attn, then xformers, when installed, on CUDA, in fp16/bf16 and
    without a key mask; otherwise torch SDPA. Optional packages are imported on first use.
    """

    def __init__(self, backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}; valid: {BACKENDS}")
        self.backend = backend
        self._probed: dict[str, Callable[..., torch.Tensor] | None] = {}
        self.calls: Counter[str] = Counter()  # calls per kernel used: flash, xformers, sdpa, sdpa-masked

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        if k.shape[1] == 0:  # hazard: CPU flash SDPA dies with SIGFPE on zero keys
            return q.new_zeros(*q.shape[:3], v.shape[-1])
        fast = self._fast_kernel(q, key_mask)
        if fast is not None:
            self.calls[fast[0]] += 1
            return fast[1](q, k, v)
        self.calls["sdpa" if key_mask is None else "sdpa-masked"] += 1
        mask = None if key_mask is None else key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
        )
        return out.transpose(1, 2)

    def _fast_kernel(
        self, q: torch.Tensor, key_mask: torch.Tensor | None
    ) -> tuple[str, Callable[..., torch.Tensor]] | None:
        if self.backend == "sdpa" or key_mask is not None:
            return None
        if not (q.is_cuda and q.dtype in _HALF):
            return None
        order = ("flash", "xformers") if self.backend == "auto" else (self.backend,)
        for name in order:
            kernel = self._probe(name)
            if kernel is not None:
                return name, kernel
        return None

    def _probe(self, name: str) -> Callable[..., torch.Tensor] | None:
        if name not in self._probed:
            self._probed[name] = _load_optional(name)
        return self._probed[name]


def load_backend(name: str) -> Callable[..., torch.Tensor]:
    """The optional kernel `name` ("flash" or "xformers"); both take [B, S, H, D] directly.
    Raises whatever importing it raises."""
    if name == "flash":
        return importlib.import_module("flash_attn").flash_attn_func
    xops: Any = importlib.import_module("xformers.ops")
    return xops.memory_efficient_attention


def _load_optional(name: str) -> Callable[..., torch.Tensor] | None:
    try:
        return load_backend(name)
    except Exception:  # noqa: BLE001 - broken optional installs count as absent
        return None


class LseKernel:
    """Block attention returning (out [B, H, Nq, D] fp32, lse [B, H, Nq] fp32); inputs [B, H, N, D].

    Without a key mask it uses torch's flash ops that return the log-sum-exp (the CPU op, or the
    CUDA op for fp16/bf16). When no fast op applies, or one fails on a call, that call takes the
    explicit fp32 path, whose score matrix is computed in query blocks of bounded size. A fast
    op that fails is tried again on the next call (a failure is logged once per device and dtype).
    """

    def __init__(self) -> None:
        self._warned: set[tuple[str, torch.dtype]] = set()

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if q.numel() == 0 or k.shape[2] == 0:
            out = q.new_zeros(*q.shape[:3], v.shape[-1], dtype=torch.float32)
            return out, q.new_full(q.shape[:3], float("-inf"), dtype=torch.float32)
        if key_mask is None and (not q.is_cuda or q.dtype in _HALF):
            try:
                return _flash_lse(q, k, v)
            except (RuntimeError, AttributeError, NotImplementedError) as error:
                self._warn_once(q, error)
        return explicit_attention_lse(q, k, v, key_mask)

    def _warn_once(self, q: torch.Tensor, error: BaseException) -> None:
        key = (q.device.type, q.dtype)
        if key not in self._warned:
            self._warned.add(key)
            first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
            _log.warning("flash attention with log-sum-exp failed on %s %s (%s); this call uses the "
                         "blocked fp32 path", q.device, q.dtype, first_line)


def _flash_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if q.is_cuda:
        res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
    else:
        res = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    return res[0].float(), res[1][..., : q.shape[2]].float()


# Score elements per block of the explicit path (fp32: 256 MiB), whatever the sequence length.
EXPLICIT_BLOCK_ELEMENTS = 1 << 26


def explicit_attention_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block attention in fp32, [B, H, N, D] layout, over query blocks so that no more than
    EXPLICIT_BLOCK_ELEMENTS scores exist at once. Rows without a valid key give 0, -inf."""
    rows = max(1, EXPLICIT_BLOCK_ELEMENTS // max(1, q.shape[0] * q.shape[1] * k.shape[2]))
    keys, values = k.float().transpose(-1, -2), v.float()
    outs, lses = [], []
    for start in range(0, q.shape[2], rows):
        scores = torch.matmul(q[:, :, start : start + rows].float(), keys) * q.shape[-1] ** -0.5
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
        outs.append(torch.matmul(torch.exp(scores - _finite(lse).unsqueeze(-1)), values))
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


def merge_partials(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Online-softmax merge of two partial attentions over disjoint key sets (fp32)."""
    lse = torch.logaddexp(lse_a, lse_b)
    ref = _finite(lse)
    weight_a = torch.exp(lse_a - ref).unsqueeze(-1)
    weight_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return out_a * weight_a + out_b * weight_b, lse


def _finite(lse: torch.Tensor) -> torch.Tensor:
    # Rows where every key is masked have lse = -inf; subtracting it would give NaN.
    return torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
