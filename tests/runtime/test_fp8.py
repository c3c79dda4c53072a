"""model.quantize fp8 on a CPU: which layers the rule quantizes, the float8 linear's math
(emulated: torch._scaled_mm needs an FP8 GPU), the planner's float8 weight bytes, the refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.errors import UserInputError
from pipedit.planner.memory import dit_weight_bytes, fp8_bytes_per_param, with_quantize
from pipedit.planner.models import full_size
from pipedit.runtime.fp8 import (Fp8Linear, check_fp8_device, dequantized_matmul, fp8_layers, keeps_precision,
                                 quantize_fp8, quantize_rows, replace_linears)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.norm1_linear = nn.Linear(width, 6 * width)  # adaLN modulation: kept
        self.attn = nn.ModuleDict({"to_q": nn.Linear(width, width), "to_out": nn.Linear(width, width)})
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.odd = nn.Linear(width, 10)  # 10 outputs: not a multiple of 16


class TinyDiT(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.time_embedder = nn.Linear(width, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(2)])
        self.proj_out = nn.Linear(width, width)  # the final projection: kept


def test_the_rule_quantizes_block_linears_and_keeps_norms_embeddings_modulation_final_projection() -> None:
    model = TinyDiT()
    chosen = fp8_layers(model)
    assert chosen == [f"blocks.{i}.{name}" for i in range(2)
                      for name in ("attn.to_q", "attn.to_out", "ff.0", "ff.2")]
    assert "outside" in keeps_precision("proj_out", model.proj_out)
    assert "norm" in keeps_precision("blocks.0.norm1_linear", model.blocks[0].norm1_linear)
    assert "16" in keeps_precision("blocks.0.odd", model.blocks[0].odd)
    assert fp8_layers(model, keep=("ff",)) == [f"blocks.{i}.attn.{n}" for i in range(2) for n in ("to_q", "to_out")]


def test_float8_linear_equals_its_dequantized_math_and_stays_near_the_full_linear() -> None:
    gen = torch.Generator().manual_seed(0)
    linear = nn.Linear(64, 32)
    x = torch.randn(3, 5, 64, generator=gen)
    fp8 = Fp8Linear(linear)
    assert fp8.weight_fp8.dtype == torch.float8_e4m3fn and fp8.weight_scale.shape == (32,)
    xq, scale = quantize_rows(x.reshape(-1, 64))
    expected = dequantized_matmul(xq, scale, fp8.weight_fp8, fp8.weight_scale, linear.bias).reshape(3, 5, 32)
    assert torch.equal(fp8(x), expected)
    # e4m3 keeps 3 mantissa bits (relative step 2^-4 per element); errors of 64-term sums average
    # out to a few percent of the output's norm: 5% bounds it, a wrong scale would be far off.
    full = linear(x).detach()
    assert ((fp8(x) - full).norm() / full.norm()).item() < 5e-2


def test_replacing_swaps_exactly_the_selected_layers() -> None:
    model = TinyDiT()
    replace_linears(model, fp8_layers(model))
    kinds = {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, (nn.Linear, Fp8Linear))}
    assert kinds["blocks.0.attn.to_q"] == "Fp8Linear" and kinds["blocks.1.ff.2"] == "Fp8Linear"
    assert kinds["proj_out"] == kinds["time_embedder"] == kinds["blocks.0.norm1_linear"] == "Linear"
    assert len(fp8_layers(model)) == 0  # nothing left to select: every selected layer was swapped


def test_a_cpu_is_refused_naming_the_device() -> None:
    with pytest.raises(UserInputError, match=r"compute capability >= 8\.9.*runs on cpu"):
        check_fp8_device(torch.device("cpu"))
    with pytest.raises(UserInputError, match="runs on cpu"):
        quantize_fp8([TinyDiT()], torch.device("cpu"))


def test_the_planner_counts_float8_weights() -> None:
    wan = full_size("wan-14b")
    bf16, fp8 = dit_weight_bytes(wan), dit_weight_bytes(with_quantize(wan, "fp8"))
    per_param = fp8_bytes_per_param(wan)
    # Wan's block linears are nearly all its weights (its modulation is a table, not a linear):
    # 1 byte each plus a 4-byte scale per output row.
    assert 1.0 < per_param < 1.05
    assert fp8 == pytest.approx(bf16 * per_param / 2)
    # HunyuanVideo's adaLN linears (3.4e9 parameters) stay in bf16.
    assert fp8_bytes_per_param(full_size("hunyuan-video")) > 1.25
    assert with_quantize(wan, "none") == wan


def test_config_refuses_unknown_values_sage_on_ring_and_unfused_adapters_with_fp8() -> None:
    with pytest.raises(UserInputError, match="model.attention must be one of auto, sdpa"):
        ModelConfig(attention="fast")
    with pytest.raises(UserInputError, match="model.quantize must be one of none, fp8"):
        ModelConfig(quantize="int4")
    with pytest.raises(UserInputError, match="log-sum-exp"):
        EngineConfig(model=ModelConfig(attention="sage"), parallel=ParallelConfig(ring=2))
    EngineConfig(model=ModelConfig(attention="sage"), parallel=ParallelConfig(ulysses=2))
    with pytest.raises(UserInputError, match="fused only"):
        ModelConfig(quantize="fp8", run_loras=("a.safetensors",))
    ModelConfig(quantize="fp8", run_loras=("a.safetensors",), fuse_loras=True)
    with pytest.raises(UserInputError, match="idle_expert offload"):
        ModelConfig(quantize="fp8", idle_expert="offload")
