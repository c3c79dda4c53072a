from __future__ import annotations

import torch

from pipedit.attention import kernels
from pipedit.attention.kernels import (
    AttentionKernel,
    LseKernel,
    explicit_attention_lse,
    merge_partials,
)
from pipedit.attention.ulysses_comm import assemble_heads
from pipedit.attention.usp import UlyssesAttention
from pipedit.attention.usp_plan import chunk_counts, stacked_order
from pipedit.distributed.context import ParallelContext


def test_chunk_counts_same_number_of_chunks_on_every_rank() -> None:
    assert chunk_counts((5, 5, 5, 5, 4), 1)[-1] == (1, 1, 1, 1, 0)
    assert len(chunk_counts((5, 5, 5, 5, 4), 1)) == 5
    assert chunk_counts((3, 2), 2) == ((2, 2), (1, 0))
    assert chunk_counts((3, 2), 3) == ((3, 2),)
    assert chunk_counts((0, 0), 1) == ((0, 0),)


def test_one_head_per_chunk_gives_the_papers_interleaved_order() -> None:
    ranks, local = 3, 4
    sizes = (local,) * ranks
    order = stacked_order(sizes, chunk_counts(sizes, 1))
    # stacked position j * n + i holds head i * h + j (paper: k_mod = j*n + i, k_orig = i*h + j)
    assert order == tuple(i * local + j for j in range(local) for i in range(ranks))
    assert stacked_order(sizes, chunk_counts(sizes, local)) is None


def test_assemble_heads_undoes_the_interleaving() -> None:
    sizes = (3, 2)
    chunks = chunk_counts(sizes, 1)
    order = stacked_order(sizes, chunks)
    heads = torch.arange(5.0).view(5, 1, 1, 1).expand(5, 2, 1, 4)  # [H, S, B, D], value = head
    stacked = heads[list(order)]
    pieces = list(torch.split(stacked, [sum(c) for c in chunks]))
    out = assemble_heads(pieces, torch.tensor(order))  # [B, S, H, D]
    assert torch.equal(out[0, 0, :, 0], torch.arange(5.0))


def test_merge_of_two_key_blocks_equals_one_softmax() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))  # [B, H, N, D]
    full, full_lse = explicit_attention_lse(q, k, v, None)
    a = explicit_attention_lse(q, k[:, :, :2], v[:, :, :2], None)
    b = explicit_attention_lse(q, k[:, :, 2:], v[:, :, 2:], None)
    out, lse = merge_partials(*a, *b)
    assert torch.allclose(out, full, atol=1e-6) and torch.allclose(lse, full_lse, atol=1e-6)


def test_fully_masked_block_contributes_nothing() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    none_valid = torch.zeros(1, 4, dtype=torch.bool)
    empty_out, empty_lse = explicit_attention_lse(q, k, v, none_valid)
    assert torch.isneginf(empty_lse).all() and not empty_out.isnan().any()
    real = explicit_attention_lse(q, k, v, None)
    out, lse = merge_partials(empty_out, empty_lse, *real)
    assert torch.equal(out, real[0]) and torch.equal(lse, real[1])
    both, both_lse = merge_partials(empty_out, empty_lse, empty_out, empty_lse)
    assert not both.isnan().any() and torch.isneginf(both_lse).all()


def test_lse_kernel_fast_path_matches_explicit_and_handles_empty() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    kernel = LseKernel()
    out, lse = kernel(q, k, v)
    ref_out, ref_lse = explicit_attention_lse(q, k, v, None)
    assert torch.allclose(out, ref_out, atol=1e-6) and torch.allclose(lse, ref_lse, atol=1e-5)
    out, lse = kernel(q, k[:, :, :0], v[:, :, :0])
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


def test_attention_kernel_zero_keys_and_cpu_backend() -> None:
    q = torch.randn(1, 3, 2, 8)
    out = AttentionKernel()(q, q[:, :0], q[:, :0], None)  # CPU flash SDPA would SIGFPE here
    assert torch.equal(out, torch.zeros_like(q))
    assert AttentionKernel("xformers")._fast_kernel(q, None) is None  # CPU: SDPA, never xformers


def _two_rank_context() -> ParallelContext:
    # Plans need only the layout; no process group is touched.
    return ParallelContext(rank=0, world_size=2, ulysses_degree=2, ring_degree=1, sp_group=None,
                           ulysses_group=None, ring_group=None, ring_global_ranks=(0,),
                           device=torch.device("cpu"))


def test_plan_and_its_head_index_are_built_once_per_layout() -> None:
    strategy = UlyssesAttention(_two_rank_context(), chunk_heads=1, num_heads=4)
    plan = strategy._plan(4, (3, 3))
    assert torch.equal(plan.order_index, torch.tensor(plan.order)) and plan.order_index.device == strategy.ctx.device
    assert strategy._plan(4, (3, 3)) is plan
    strategy.chunk_heads = 2  # no interleaving left: no index to build
    assert strategy._plan(4, (3, 3)).order_index is None


def test_lse_fast_path_failure_falls_back_for_that_call_only(monkeypatch) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    attempts, fast = [], kernels._flash_lse

    def flaky(*args):
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise RuntimeError("no kernel image for this device")
        return fast(*args)

    monkeypatch.setattr(kernels, "_flash_lse", flaky)
    kernel = LseKernel()
    reference = explicit_attention_lse(q, k, v, None)
    for _ in range(2):
        out, lse = kernel(q, k, v)
        assert torch.allclose(out, reference[0], atol=1e-6) and torch.allclose(lse, reference[1], atol=1e-5)
    assert attempts == [0, 1]  # the fast path was tried again after its failure


def test_explicit_path_blocks_the_queries(monkeypatch) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 8) for _ in range(3))
    mask = torch.rand(2, 7) > 0.3
    whole = explicit_attention_lse(q, k, v, mask)
    monkeypatch.setattr(kernels, "EXPLICIT_BLOCK_ELEMENTS", 2 * 3 * 7 * 2)  # two query rows per block
    blocks, logsumexp = [], torch.logsumexp

    def counted(scores, dim):
        blocks.append(scores.shape[2])
        return logsumexp(scores, dim=dim)

    monkeypatch.setattr(torch, "logsumexp", counted)
    blocked = explicit_attention_lse(q, k, v, mask)
    assert blocks == [2, 2, 2, 1]  # never more than two query rows of scores at once
    # Rows are independent; only the matmul's blocking may differ: float rounding.
    assert torch.allclose(blocked[0], whole[0], atol=1e-6) and torch.allclose(blocked[1], whole[1], atol=1e-6)


def test_attention_kernel_counts_the_kernel_it_used() -> None:
    kernel = AttentionKernel()
    q = torch.randn(1, 4, 2, 8)
    kernel(q, q, q, None)
    kernel(q, q, q, torch.ones(1, 4, dtype=torch.bool))
    assert kernel.calls == {"sdpa": 1, "sdpa-masked": 1}
