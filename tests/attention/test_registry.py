from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pipedit.attention import available_strategies, get_attention_strategy
from pipedit.attention.base import JointTokens
from pipedit.distributed.context import ParallelContext

CPU = torch.device("cpu")


def fake_ctx(ulysses: int, ring: int) -> ParallelContext:
    """A context for construction-time checks only (no groups: never called)."""
    return ParallelContext(0, ulysses * ring, ulysses, ring, None, None, None, (0,) * ring, CPU)


def test_names() -> None:
    assert available_strategies() == ("local", "ulysses", "ring", "usp", "aco")


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="local, ulysses, ring, usp"):
        get_attention_strategy("flash-ring", ParallelContext.single())


def test_unknown_option_lists_accepted_ones() -> None:
    with pytest.raises(ValueError, match="chunk_heads"):
        get_attention_strategy("ulysses", ParallelContext.single(), chunk=2)


@pytest.mark.parametrize("chunk", [0, -1, "auto", 1.5, True])
def test_chunk_heads_must_be_resolved_positive_int(chunk: object) -> None:
    with pytest.raises(ValueError, match="chunk_heads"):
        get_attention_strategy("ulysses", ParallelContext.single(), chunk_heads=chunk)
    strategy = get_attention_strategy("usp", ParallelContext.single(), chunk_heads=2)
    with pytest.raises(ValueError, match="chunk_heads"):
        strategy.chunk_heads = chunk  # the autotuner sets it between calls
    strategy.chunk_heads = None
    assert strategy.chunk_heads is None


def test_ring_accepts_num_heads_but_no_chunking() -> None:
    ring = get_attention_strategy("ring", ParallelContext.single(), num_heads=4)
    assert ring.chunk_heads is None
    with pytest.raises(ValueError, match="chunk_heads must be None"):
        ring.chunk_heads = 1


def test_layout_mismatches_are_refused() -> None:
    with pytest.raises(ValueError, match="single-rank"):
        get_attention_strategy("local", fake_ctx(2, 1))
    with pytest.raises(ValueError, match="use 'usp'"):
        get_attention_strategy("ulysses", fake_ctx(2, 2))
    with pytest.raises(ValueError, match="use 'usp'"):
        get_attention_strategy("ring", fake_ctx(2, 2))
    with pytest.raises(ValueError, match="backend"):
        get_attention_strategy("local", ParallelContext.single(), backend="cudnn")


def test_more_ulysses_ranks_than_heads_names_valid_layouts() -> None:
    with pytest.raises(ValueError, match=r"\(1, 4\), \(2, 2\)\]"):
        get_attention_strategy("ulysses", fake_ctx(4, 1), num_heads=2)
    get_attention_strategy("usp", fake_ctx(2, 2), num_heads=2)  # fine: 1 head per ulysses rank


def make(batch: int, seq: int, heads: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(batch, seq, heads, 8).to(dtype)


@pytest.mark.parametrize("name", ["ulysses", "ring", "usp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_world_one_equals_local(name: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    q, k, v = (make(2, 6, 3, dtype) for _ in range(3))
    jq, jk, jv = (make(2, 4, 3, dtype) for _ in range(3))
    mask = torch.tensor([[True, True, False, False], [True] * 4])
    ctx = ParallelContext.single()
    kwargs = dict(shard_sizes=(6,), joint=JointTokens(jq, jk, jv, mask))
    ref, ref_joint = get_attention_strategy("local", ctx)(q, k, v, **kwargs)
    out, joint = get_attention_strategy(name, ctx)(q, k, v, **kwargs)
    # world 1 runs the same SDPA call as "local": exact
    assert torch.equal(out, ref) and torch.equal(joint, ref_joint)
    assert out.dtype == dtype and joint.dtype == dtype


def test_local_mask_ignores_padded_keys() -> None:
    torch.manual_seed(0)
    q, k, v = (make(1, 5, 2) for _ in range(3))
    jq, jk, jv = (make(1, 3, 2) for _ in range(3))
    local = get_attention_strategy("local", ParallelContext.single())
    mask = torch.tensor([[True, False, False]])
    out, joint = local(q, k, v, shard_sizes=(5,), joint=JointTokens(jq, jk, jv, mask))
    garbage = jk.clone()
    garbage[:, 1:] = 1e4  # masked keys: must not matter
    out2, joint2 = local(q, k, v, shard_sizes=(5,), joint=JointTokens(jq, garbage, jv, mask))
    assert torch.allclose(out, out2) and torch.allclose(joint, joint2)
    no_text, none = local(q, k, v, shard_sizes=(5,))
    assert none is None and no_text.shape == q.shape


def test_input_validation() -> None:
    strategy = get_attention_strategy("usp", ParallelContext.single())
    q = make(1, 4, 2)
    with pytest.raises(ValueError, match="shard_sizes"):
        strategy(q, q, q, shard_sizes=(3,))
    with pytest.raises(ValueError, match="shard_sizes"):
        strategy(q, q, q, shard_sizes=(2, 2))
    with pytest.raises(ValueError, match="without joint"):
        strategy(q, q, q, shard_sizes=(4,), joint=JointTokens(kv_mask=torch.ones(1, 2, dtype=torch.bool)))
    with pytest.raises(ValueError, match="all of joint"):
        strategy(q, q, q, shard_sizes=(4,), joint=JointTokens(q=make(1, 2, 2)))
    with pytest.raises(ValueError, match="bool"):
        t = make(1, 2, 2)
        strategy(q, q, q, shard_sizes=(4,), joint=JointTokens(t, t, t, torch.ones(1, 2)))


def test_strategies_are_imported_lazily() -> None:
    code = "import sys, pipedit.attention; print('pipedit.attention.usp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
