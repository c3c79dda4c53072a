"""FP8 weights and activations for the DiT's linear layers (model.quantize: fp8).

Which layers: `fp8_layers` selects the nn.Linear modules inside the repeated blocks (a dotted name
with a block index, e.g. "blocks.3.attn.to_q") whose in and out features are multiples of 16
(what float8 matmuls take), except those named like a norm, an embedding or a modulation (adaLN)
inside the block: the layers every peer keeps in high precision. Everything outside the repeated
blocks (patch and time embeddings, the final norm and projection) stays too. A family adds name
fragments to keep through its entry's `fp8_keep` (pipedit.families).

How: torchao's float8 inference (dynamic per-row activation, per-row weight scales) when a
torchao that works with this torch is installed, else `Fp8Linear`: the weight stored as
float8_e4m3fn with one fp32 scale per output row, each activation row quantized on the fly with
its own scale, one torch._scaled_mm with both scales and the bias, output in the input's dtype.
On a CPU `Fp8Linear` computes the same math dequantized (tests only: serving refuses a CPU).

Hazard: the float8 weights are buffers; a module.to(dtype) after quantizing would cast them back
to that dtype (scales kept): pipedit moves the DiT between devices only, never between dtypes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import nn

from ..errors import UserInputError

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_CAPABILITY = (8, 9)  # Ada and Hopper onwards have FP8 tensor cores
# Name parts inside a block that stay in high precision: norms (and their adaLN linears, e.g.
# "norm1.linear"), embeddings, modulation.
DEFAULT_KEEP = ("norm", "emb", "modulation", "adaln")
_log = logging.getLogger(__name__)


def _in_block(name: str) -> str | None:
    """The part of `name` after its first block index ("blocks.3.attn.to_q" -> "attn.to_q"); None
    outside the repeated blocks."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[i + 1:])
    return None


def keeps_precision(name: str, module: nn.Module, keep: Iterable[str] = ()) -> str | None:
    """Why the module named `name` stays in high precision (None: it is quantized)."""
    if not isinstance(module, nn.Linear):
        return "not a linear layer"
    inner = _in_block(name)
    if inner is None:
        return "outside the repeated blocks (embeddings, final norm and projection)"
    fragments = (*DEFAULT_KEEP, *keep)
    hit = next((f for f in fragments if f in inner.lower()), None)
    if hit is not None:
        return f"named like {hit!r} (norm, embedding or modulation)"
    if module.in_features % 16 or module.out_features % 16:
        return "features not a multiple of 16"
    return None


def fp8_layers(model: nn.Module, keep: Iterable[str] = ()) -> list[str]:
    """Dotted names of the linear layers `model` would have in float8."""
    keep = tuple(keep)
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and keeps_precision(name, module, keep) is None]


def check_fp8_device(device: torch.device) -> None:
    """Refuses a device without FP8 matmuls, naming what it has."""
    if device.type != "cuda":
        raise UserInputError(f"model.quantize fp8 needs a CUDA GPU with FP8 (compute capability >= "
                             f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}); this rank runs on {device.type}: "
                             f"drop --quantize fp8")
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        raise UserInputError(f"model.quantize fp8 needs compute capability >= {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} "
                             f"(Ada, Hopper or newer); {torch.cuda.get_device_name(device)} has "
                             f"{capability[0]}.{capability[1]}: drop --quantize fp8")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (float8 [M, K], fp32 scale [M, 1]) with x ~= q * scale, one scale per row."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def dequantized_matmul(xq: torch.Tensor, x_scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor,
                       bias: torch.Tensor | None) -> torch.Tensor:
    """The float8 matmul's math in fp32: (xq * x_scale) @ (wq * w_scale)^T + bias."""
    out = (xq.float() * x_scale) @ (wq.float() * w_scale[:, None]).t()
    return out if bias is None else out + bias.float()


class Fp8Linear(nn.Module):
    """A linear layer with float8 weights (per output row scales) and float8 activations (per row)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight, scale = quantize_rows(linear.weight.detach())
        self.register_buffer("weight_fp8", weight)
        self.register_buffer("weight_scale", scale.squeeze(1))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        xq, x_scale = quantize_rows(rows)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if x.is_cuda:
            out = torch._scaled_mm(xq, self.weight_fp8.t(), scale_a=x_scale, scale_b=self.weight_scale[None, :],
                                   bias=bias, out_dtype=x.dtype)
        else:
            out = dequantized_matmul(xq, x_scale, self.weight_fp8, self.weight_scale, bias).to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float8_e4m3fn per-row"


def replace_linears(model: nn.Module, names: list[str]) -> None:
    """Swaps each named nn.Linear of `model` for its Fp8Linear."""
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Fp8Linear(getattr(parent, child)))


def _torchao_quantize(model: nn.Module, names: set[str]) -> bool:
    """torchao's float8 inference with per-row scales on the named layers; False when no working
    torchao is installed (its wheels are built for one torch release each)."""
    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_
    except Exception:  # noqa: BLE001 - absent, or built for another torch: use Fp8Linear
        return False
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
              filter_fn=lambda module, fqn: fqn in names)
    return True


def quantize_fp8(transformers: Iterable[nn.Module], device: torch.device, keep: Iterable[str] = ()) -> str:
    """Quantizes every DiT's selected linear layers in place; returns the implementation used
    ("torchao" or "scaled_mm"). Refuses a device without FP8 first."""
    check_fp8_device(device)
    used = "scaled_mm"
    for model in transformers:
        names = fp8_layers(model, keep)
        if _torchao_quantize(model, set(names)):
            used = "torchao"
        else:
            replace_linears(model, names)
        _log.info("fp8: %d linear layers quantized (%s)", len(names), used)
    return used
