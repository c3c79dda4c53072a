"""The attention kernel chosen by measurement (fake timings here), agreed across ranks, and the
padded-text split: video keys by the unmasked log-sum-exp kernel, padded text keys by a small
masked pass, merged by log-sum-exp.

Tolerance of the split against torch's masked SDPA (fp32, CPU): 1e-5 absolute. Both compute the
same softmax; the split sums the two key sets' exponentials separately and rescales them once
(merge_partials), so results differ by fp32 rounding of a few operations on O(1) values (seen:
~3e-7), far below any wrong mask (O(0.1))."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_choice_cases import agree_on_kernels

from pipedit.attention import get_attention_strategy
from pipedit.attention.base import JointTokens
from pipedit.attention.kernel_choice import check_kernel_setting, choose_kernels, pick_fastest
from pipedit.attention.kernels import AttentionKernel, KernelChoice, attention_kernels
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.spawn import run_on_gloo_ranks
from pipedit.errors import UserInputError

ATOL = 1e-5


def _masked_reference(q, k, v, mask):
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=mask[:, None, None, :])
    return out.transpose(1, 2)


@pytest.mark.parametrize("valid_text", ["random", "none valid", "one row none"])
def test_padded_text_split_equals_masked_sdpa(valid_text: str) -> None:
    gen = torch.Generator().manual_seed(3)
    batch, video, text, heads, dim = 3, 11, 6, 2, 8
    q, k, v = (torch.randn(batch, video, heads, dim, generator=gen) for _ in range(3))
    tq, tk, tv = (torch.randn(batch, text, heads, dim, generator=gen) for _ in range(3))
    mask = torch.rand(batch, text, generator=gen) < 0.5
    if valid_text == "none valid":
        mask[:] = False
    if valid_text == "one row none":
        mask[1] = False
    strategy = get_attention_strategy("local", ParallelContext.single())
    strategy.kernel.use(choose_kernels(ParallelContext.single(), torch.float32))  # as the runtime does
    out, text_out = strategy(q, k, v, shard_sizes=(video,), joint=JointTokens(tq, tk, tv, mask))
    keys_mask = torch.cat([torch.ones(batch, video, dtype=torch.bool), mask], dim=1)
    reference = _masked_reference(torch.cat([q, tq], 1), torch.cat([k, tk], 1), torch.cat([v, tv], 1), keys_mask)
    assert (torch.cat([out, text_out], 1) - reference).abs().max().item() <= ATOL
    # The call never fell to SDPA's masked path: the video keys went unmasked, with log-sum-exp.
    assert strategy.kernel.calls == {"padded-split": 1}
    assert strategy.kernel.lse.calls == {"sdpa": 1, "explicit-masked": 1}


def test_unpadded_text_keeps_the_unmasked_kernel_and_no_choice_keeps_masked_sdpa() -> None:
    q, k, v = (torch.randn(1, 5, 2, 8) for _ in range(3))
    kernel = AttentionKernel()
    kernel(q, k, v, None, dense_keys=5)
    kernel(q, k, v, torch.tensor([[True, True, True, False, True]]), dense_keys=3)
    assert kernel.calls == {"sdpa": 1, "sdpa-masked": 1}  # no choice: diffusers' own masked call


def _fake(times: dict[str, float]):
    return lambda form, entry: times.get(entry.name, "not timed")


def test_the_fastest_measured_kernel_is_chosen() -> None:
    ctx = ParallelContext.single()
    choice = choose_kernels(ctx, torch.float32, measure=_fake({"sdpa": 2.0, "sdpa-flash": 1.5}))
    assert (choice.plain, choice.lse) == ("sdpa-flash", "sdpa-flash")
    assert choice.measured["plain"]["sdpa"] == 2.0 and choice.measured["plain"]["flash"] == "needs CUDA"
    slower = choose_kernels(ctx, torch.float32, measure=_fake({"sdpa": 1.0, "sdpa-flash": 1.5}))
    assert slower.plain == "sdpa"


def test_ties_go_to_the_table_order_and_nothing_measured_is_the_reference() -> None:
    assert pick_fastest({"sdpa": 1.0, "sdpa-flash": 1.0}) == "sdpa"
    assert pick_fastest({"sdpa-cudnn": float("inf"), "flash": float("inf")}) == "sdpa"
    assert pick_fastest({"sdpa": 2.0, "sdpa-cudnn": 1.0, "flash": float("inf")}) == "sdpa-cudnn"


def test_lossy_kernels_are_never_picked_by_auto() -> None:
    assert [e.name for e in attention_kernels() if not e.exact] == ["sage"]
    seen = []
    choose_kernels(ParallelContext.single(), torch.float32, measure=lambda f, e: seen.append(e.name) or 1.0)
    assert "sage" not in seen


def test_ranks_agree_on_the_slowest_ranks_fastest_kernel() -> None:
    results = run_on_gloo_ranks(agree_on_kernels, 2, timeout_s=120)
    assert [r["plain"] for r in results] == ["sdpa-flash", "sdpa-flash"]
    assert [r["lse"] for r in results] == ["sdpa-flash", "sdpa-flash"]
    assert results[1]["local_pick"] == "sdpa"  # rank 1 alone would have run sdpa: it follows the agreement


def test_a_chosen_kernel_runs_for_its_dtype_only() -> None:
    kernel = AttentionKernel()
    kernel.use(KernelChoice("cpu", torch.float32, "sdpa-flash", "sdpa-flash"))
    q, k, v = (torch.randn(1, 5, 2, 8) for _ in range(3))
    kernel(q, k, v, None)
    kernel(q.double(), k.double(), v.double(), None)
    assert kernel.calls == {"sdpa-flash": 1, "sdpa": 1}


def test_a_named_kernel_this_machine_lacks_is_refused() -> None:
    with pytest.raises(UserInputError, match="sage .*needs CUDA"):
        check_kernel_setting("sage", "cpu")
    with pytest.raises(UserInputError, match="needs CUDA"):
        check_kernel_setting("sdpa-cudnn", "cpu")
    check_kernel_setting("auto", "cpu")
    check_kernel_setting("sdpa", "cpu")


class _Adapter:
    num_heads, compute_dtype = 4, torch.float32

    def attention_shape(self, shape):
        from pipedit.attention.autotune import AttentionShape

        return AttentionShape(seq_len=64, text_len=0, heads=4, head_dim=16)

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        self.strategy = strategy
        return 3


class _Layout:
    aco = False


def test_one_cpu_rank_keeps_the_models_attention_unless_a_kernel_is_named() -> None:
    from pipedit.config import ParallelConfig
    from pipedit.runtime.sequence_parallel import SequenceParallelRuntime

    ctx = ParallelContext.single()
    assert SequenceParallelRuntime.install(_Adapter(), ctx, _Layout(), ParallelConfig()) is None
    adapter = _Adapter()
    runtime = SequenceParallelRuntime.install(adapter, ctx, _Layout(), ParallelConfig(), attention="sdpa-flash")
    assert adapter.strategy.name == "local" and runtime.kernels.plain == "sdpa-flash"
    assert adapter.strategy.kernel.choice is runtime.kernels
