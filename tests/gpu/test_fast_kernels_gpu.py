"""The measured attention choice, the padded-text split, SageAttention's drift and FP8 linears
on one GPU. A CPU cannot check these: the timed candidates (cuDNN, flash-attn, xformers) and
SageAttention are CUDA kernels, and torch._scaled_mm needs FP8 tensor cores (sm89+); the CPU
tests cover the choice logic with fake timings and the float8 math emulated."""

import pytest
import torch
from torch import nn

from pipedit.attention.base import JointTokens
from pipedit.attention.kernel_choice import choose_kernels, describe, unavailable
from pipedit.attention.kernel_probe import kernel_drift
from pipedit.attention.kernels import kernel_entry
from pipedit.attention.local import LocalAttention
from pipedit.distributed.context import ParallelContext
from pipedit.runtime.fp8 import Fp8Linear, MIN_CAPABILITY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]
DEVICE = torch.device("cuda", 0)


def test_auto_measures_every_installed_kernel_and_runs_the_fastest() -> None:
    # Prints the table `pipedit env` shows; the chosen kernel must have a number, the fastest one.
    choice = choose_kernels(ParallelContext.single(DEVICE), torch.bfloat16)
    report = describe(choice)
    print(report)
    plain = {n: ms for n, ms in choice.measured["plain"].items() if isinstance(ms, float)}
    assert choice.plain == min(plain, key=plain.get)


def test_padded_split_on_the_chosen_kernel_matches_masked_sdpa_in_bf16() -> None:
    # bf16 inputs; both paths accumulate in fp32, the split rounds its video part once more to
    # bf16-level accuracy: 2e-2 absolute on unit-variance inputs (bf16 step is 2^-8 relative).
    ctx = ParallelContext.single(DEVICE)
    strategy = LocalAttention(ctx)
    strategy.kernel.use(choose_kernels(ctx, torch.bfloat16))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4096, 8, 128, generator=gen).to(DEVICE, torch.bfloat16) for _ in range(3))
    tq, tk, tv = (torch.randn(1, 77, 8, 128, generator=gen).to(DEVICE, torch.bfloat16) for _ in range(3))
    mask = torch.arange(77, device=DEVICE)[None] < 40
    out, _ = strategy(q, k, v, shard_sizes=(4096,), joint=JointTokens(tq, tk, tv, mask))
    keys = torch.cat([torch.ones(1, 4096, dtype=torch.bool, device=DEVICE), mask], 1)
    ref = torch.nn.functional.scaled_dot_product_attention(
        torch.cat([q, tq], 1).transpose(1, 2), torch.cat([k, tk], 1).transpose(1, 2),
        torch.cat([v, tv], 1).transpose(1, 2), attn_mask=keys[:, None, None, :]).transpose(1, 2)
    assert (out.float() - ref[:, :4096].float()).abs().max().item() < 2e-2
    assert "sdpa-masked" not in strategy.kernel.calls


def test_sage_drift_is_printed_and_bounded() -> None:
    # SageAttention quantizes Q K^T to INT8: its drift must stay within a few times exact bf16's.
    if unavailable(kernel_entry("sage"), "cuda", torch.bfloat16):
        pytest.skip("sageattention is not installed (pip install sageattention==1.0.6)")
    drift = kernel_drift("sage", DEVICE)
    assert drift["relative_l2"] < 5e-2


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < MIN_CAPABILITY,
                    reason="FP8 needs compute capability >= 8.9")
def test_fp8_linear_drift_against_bf16() -> None:
    # One DiT-sized linear in float8 (torch._scaled_mm, per-row scales) against bf16: e4m3's 3
    # mantissa bits give about 2-4% relative error on random data; 6% would mean a wrong scale.
    gen = torch.Generator().manual_seed(0)
    linear = nn.Linear(3072, 3072 * 4).to(DEVICE, torch.bfloat16)
    x = torch.randn(4096, 3072, generator=gen).to(DEVICE, torch.bfloat16)
    exact = linear(x).float()
    got = Fp8Linear(linear)(x).float()
    drift = ((got - exact).norm() / exact.norm()).item()
    print(f"fp8 linear drift vs bf16: relative L2 {drift:.3e}")
    assert drift < 6e-2
