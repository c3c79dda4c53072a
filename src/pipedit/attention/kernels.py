"""Single-device attention kernels in the [B, S, H, D] layout.

`attention_kernels()` lists every kernel pipedit can run (torch SDPA's backends, flash-attn 2/3,
xformers, SageAttention): one `KernelEntry` each, with its plain form ([B, S, H, D] in and out)
and, where it has one, its log-sum-exp form ([B, H, N, D] in; out and lse in fp32) that Ring
attention and the padded-text split need. `AttentionKernel` is the reference path (torch SDPA
with a boolean key mask, as diffusers' HunyuanVideo calls it) and runs the kernel a
`KernelChoice` (pipedit.attention.kernel_choice) names for its device and dtype. `LseKernel`
returns (out, log-sum-exp) per block; `merge_partials` combines blocks with online softmax in fp32.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "sdpa", "xformers", "flash")
_HALF = (torch.float16, torch.bfloat16)
_log = logging.getLogger(__name__)

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # [B, S, H, D] each
AttendLse = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class KernelEntry:
    """One attention kernel: `plain` and `lse` load its two forms (None: it has no LSE form).
    Loading imports the optional package and raises what importing it raises."""

    name: str
    module: str  # the module that must be importable ("torch": always)
    exact: bool  # False: stated-lossy (8-bit attention), never picked by "auto"
    cuda_only: bool
    plain: Callable[[], Attend]
    lse: Callable[[], AttendLse] | None = None
    about: str = ""


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


def _sdpa_backend(member: str) -> Attend:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, member)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(backend):
            return _sdpa(q, k, v)

    return attend


def _flash_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if q.is_cuda:
        res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
    else:
        res = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
    return res[0].float(), res[1][..., : q.shape[2]].float()


def _efficient_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # The lse comes padded to a multiple of 32 queries: keep the real ones.
    res = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
    return res[0].float(), res[1][..., : q.shape[2]].float()


def _cudnn_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    res = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False)
    return res[0].float(), res[1].reshape(q.shape[:3]).float()  # cuDNN's lse is [B, H, N, 1]


def _flash2() -> Attend:
    return importlib.import_module("flash_attn").flash_attn_func


def _flash2_lse() -> AttendLse:
    attend = _flash2()

    def lse(q, k, v):  # flash-attn takes [B, S, H, D]; its lse is [B, H, S]
        out, lse_, _ = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), return_attn_probs=True)
        return out.transpose(1, 2).float(), lse_.float()

    return lse


def _flash3() -> Attend:
    attend = importlib.import_module("flash_attn_interface").flash_attn_func

    def plain(q, k, v):  # releases differ: some return (out, lse), some out alone
        out = attend(q, k, v)
        return out[0] if isinstance(out, tuple) else out

    return plain


def _flash3_lse() -> AttendLse:
    attend = importlib.import_module("flash_attn_interface").flash_attn_func

    def lse(q, k, v):
        res = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), return_attn_probs=True)
        return res[0].transpose(1, 2).float(), res[1].float()

    return lse


def _xformers() -> Attend:
    xops: Any = importlib.import_module("xformers.ops")
    return xops.memory_efficient_attention


def _sage() -> Attend:
    sageattn = importlib.import_module("sageattention").sageattn

    def plain(q, k, v):  # INT8 Q K^T, fp16 P V (SageAttention 1.x); [B, S, H, D] is its "NHD"
        return sageattn(q, k, v, tensor_layout="NHD", is_causal=False)

    return plain


# Order matters: "auto" breaks equal timings by it, and the reference ("sdpa") comes first.
_ENTRIES = (
    KernelEntry("sdpa", "torch", True, False, lambda: _sdpa, lambda: _flash_lse,
                "torch SDPA, its default dispatch (lse: the flash op)"),
    KernelEntry("sdpa-flash", "torch", True, False, lambda: _sdpa_backend("FLASH_ATTENTION"), lambda: _flash_lse,
                "torch SDPA forced to its flash backend"),
    KernelEntry("sdpa-efficient", "torch", True, True, lambda: _sdpa_backend("EFFICIENT_ATTENTION"),
                lambda: _efficient_lse, "torch SDPA forced to its memory-efficient backend"),
    KernelEntry("sdpa-cudnn", "torch", True, True, lambda: _sdpa_backend("CUDNN_ATTENTION"), lambda: _cudnn_lse,
                "torch SDPA forced to its cuDNN backend (the fast one on Hopper)"),
    KernelEntry("flash", "flash_attn", True, True, _flash2, _flash2_lse, "flash-attn 2"),
    KernelEntry("flash3", "flash_attn_interface", True, True, _flash3, _flash3_lse, "flash-attn 3 (Hopper)"),
    KernelEntry("xformers", "xformers", True, True, _xformers, None, "xformers memory_efficient_attention"),
    KernelEntry("sage", "sageattention", False, True, _sage, None,
                "SageAttention: 8-bit Q K^T, lossy; no log-sum-exp, so not for Ring"),
)


def attention_kernels() -> tuple[KernelEntry, ...]:
    """Every attention kernel pipedit knows, in preference order (ties go to the earlier)."""
    return _ENTRIES


def kernel_entry(name: str) -> KernelEntry:
    for entry in _ENTRIES:
        if entry.name == name:
            return entry
    raise ValueError(f"unknown attention kernel {name!r}; valid: {', '.join(e.name for e in _ENTRIES)}")


def load_backend(name: str) -> Attend:
    """The plain form of kernel `name` ([B, S, H, D] in and out); raises what importing it raises."""
    return kernel_entry(name).plain()


def _load_optional(name: str) -> Attend | None:
    try:
        return load_backend(name)
    except Exception:  # noqa: BLE001 - broken optional installs count as absent
        return None


@dataclass(frozen=True)
class KernelChoice:
    """The kernels one device and dtype runs (pipedit.attention.kernel_choice makes it): `plain`
    for unmasked calls, `lse` for Ring blocks and the padded-text split (None: the reference).
    `why`: how it was chosen (measured ms per candidate, or the setting that named it)."""

    device_type: str
    dtype: torch.dtype
    plain: str
    lse: str | None
    why: str = ""
    # {"plain" | "lse": {kernel name: ms per probe call, or why it was not a candidate}}
    measured: dict = field(default_factory=dict, compare=False)

    def applies(self, q: torch.Tensor) -> bool:
        return q.device.type == self.device_type and q.dtype == self.dtype


class AttentionKernel:
    """softmax(q k^T / sqrt(D)) v over keys where key_mask [B, N] is True (None: all keys).

    With a `KernelChoice` for the call's device and dtype (`use`), unmasked calls run its plain
    kernel. Without one, backend "auto" uses flash-attn, then xformers, when installed, on CUDA,
    in fp16/bf16; otherwise torch SDPA. With a choice in use, a masked call whose first
    `dense_keys` keys are all valid (video keys before padded text) attends those with the
    log-sum-exp kernel, unmasked, and the rest with a small masked pass, merged by log-sum-exp:
    padded text never pushes the whole call onto SDPA's masked path. Without one (a strategy built
    outside the runtime) masked calls take SDPA's masked path, bit-identical to diffusers' own.
    Optional packages are imported on first use.
    """

    def __init__(self, backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}; valid: {BACKENDS}")
        self.backend = backend
        self.choice: KernelChoice | None = None
        self.lse = LseKernel()
        self._probed: dict[str, Attend | None] = {}
        # calls per kernel used: a kernel name, "sdpa-masked", or "padded-split" (dense + masked text)
        self.calls: Counter[str] = Counter()

    def use(self, choice: KernelChoice | None) -> None:
        """Run `choice`'s kernels for calls on its device and dtype (None: the built-in order)."""
        if choice is not None:
            self._probed[choice.plain] = load_backend(choice.plain)  # a missing package fails here, at setup
        self.choice = choice
        self.lse.use(choice)

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None,
        dense_keys: int = 0,
    ) -> torch.Tensor:
        if k.shape[1] == 0:  # hazard: CPU flash SDPA dies with SIGFPE on zero keys
            return q.new_zeros(*q.shape[:3], v.shape[-1])
        if key_mask is not None and self.choice is not None and 0 < dense_keys < k.shape[1]:
            self.calls["padded-split"] += 1
            return self._padded(q, k, v, key_mask, dense_keys)
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

    def _padded(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor,
                dense_keys: int) -> torch.Tensor:
        """Keys [:dense_keys] (all valid) by the LSE kernel, the rest masked, merged in fp32."""
        q_t, k_t, v_t = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        dense = self.lse(q_t, k_t[:, :, :dense_keys], v_t[:, :, :dense_keys])
        rest = self.lse(q_t, k_t[:, :, dense_keys:], v_t[:, :, dense_keys:], key_mask[:, dense_keys:])
        out, _ = merge_partials(*dense, *rest)
        return out.transpose(1, 2).to(q.dtype)

    def _fast_kernel(self, q: torch.Tensor, key_mask: torch.Tensor | None) -> tuple[str, Attend] | None:
        if key_mask is not None:
            return None
        if self.choice is not None and self.choice.applies(q):
            name = self.choice.plain
            return (name, self._probed[name]) if name != "sdpa" else None  # type: ignore[return-value]
        if self.backend == "sdpa" or not (q.is_cuda and q.dtype in _HALF):
            return None
        order = ("flash", "xformers") if self.backend == "auto" else (self.backend,)
        for name in order:
            kernel = self._probe(name)
            if kernel is not None:
                return name, kernel
        return None

    def _probe(self, name: str) -> Attend | None:
        if name not in self._probed:
            self._probed[name] = _load_optional(name)
        return self._probed[name]


class LseKernel:
    """Block attention returning (out [B, H, Nq, D] fp32, lse [B, H, Nq] fp32); inputs [B, H, N, D].

    Without a key mask it uses the chosen kernel's LSE form (`use`) for the call's device and
    dtype, else torch's flash ops that return the log-sum-exp (the CPU op, or the CUDA op for
    fp16/bf16). When no fast op applies, or one fails on a call, that call takes the explicit
    fp32 path, whose score matrix is computed in query blocks of bounded size. A fast op that
    fails is tried again on the next call (a failure is logged once per device and dtype).
    """

    def __init__(self) -> None:
        self._warned: set[tuple[str, torch.dtype]] = set()
        self._chosen: tuple[KernelChoice, AttendLse] | None = None
        self.calls: Counter[str] = Counter()  # calls per path: a kernel name, "explicit", "explicit-masked"

    def use(self, choice: KernelChoice | None) -> None:
        lse = None if choice is None or choice.lse is None else kernel_entry(choice.lse).lse
        self._chosen = None if lse is None else (choice, lse())  # type: ignore[arg-type]

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
        if key_mask is None:
            name, attend = self._fast(q)
            if attend is not None:
                try:
                    result = attend(q, k, v)
                    self.calls[name] += 1
                    return result
                except (RuntimeError, AttributeError, NotImplementedError, TypeError) as error:
                    self._warn_once(q, error)
        self.calls["explicit" if key_mask is None else "explicit-masked"] += 1
        return explicit_attention_lse(q, k, v, key_mask)

    def _fast(self, q: torch.Tensor) -> tuple[str, AttendLse | None]:
        if self._chosen is not None and self._chosen[0].applies(q):
            return self._chosen[0].lse, self._chosen[1]  # type: ignore[return-value]
        if not q.is_cuda or q.dtype in _HALF:
            return "sdpa", _flash_lse
        return "", None

    def _warn_once(self, q: torch.Tensor, error: BaseException) -> None:
        key = (q.device.type, q.dtype)
        if key not in self._warned:
            self._warned.add(key)
            first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
            _log.warning("attention with log-sum-exp failed on %s %s (%s); this call uses the "
                         "blocked fp32 path", q.device, q.dtype, first_line)


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
