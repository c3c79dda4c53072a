"""The pure functions a sequence-parallel processor reuses: Skiparse regrouping over the full
sequence (checked against the documented index sets) and RoPE tables for a token shard."""

import pytest
import torch

from pipedit.integrations.opensora_plan.rope import rope_tables, token_positions
from pipedit.integrations.opensora_plan.skiparse import PAD_KEY_BIAS, SparseLayout, layer_layout


@pytest.mark.parametrize("group", [False, True])
@pytest.mark.parametrize("seq_len", [45, 48, 7])
def test_regroup_matches_the_documented_sub_sequences(group, seq_len):
    n, batch = 4, 2
    layout = SparseLayout(n, group)
    padded = layout.padded_length(seq_len)
    assert padded % (n * n) == 0 and padded - seq_len < n * n
    x = torch.arange(batch * seq_len, dtype=torch.float64).reshape(batch, seq_len, 1, 1) + 1  # 0 marks padding
    y = layout.regroup(x)
    assert y.shape == (n * batch, padded // n, 1, 1)
    for k in range(n):
        members = [j for j in range(padded) if ((j // n) % n if group else j % n) == k]
        for b in range(batch):
            want = [x[b, j, 0, 0].item() if j < seq_len else 0.0 for j in members]
            assert y[k * batch + b, :, 0, 0].tolist() == want  # batch order (k, b)
    assert torch.equal(layout.ungroup(y, seq_len), x)


def test_key_bias_marks_padding_and_keeps_the_given_bias():
    layout = SparseLayout(4, group=True)
    bias = torch.zeros(1, 45)
    bias[0, 3] = -10000.0
    regrouped = layout.key_bias(bias, 1, 45, torch.float32, "cpu")
    assert regrouped.shape == (4, 12)
    assert (regrouped == PAD_KEY_BIAS).sum() == 3  # 48 - 45 padded keys
    assert (regrouped == -10000.0).sum() == 1
    assert torch.equal(layout.ungroup(regrouped[..., None], 45)[..., 0], bias)


def test_sparse_layers_are_two_to_twenty_nine():
    layouts = [layer_layout(i, True, 4) for i in range(32)]
    assert [i for i, l in enumerate(layouts) if l is not None] == list(range(2, 30))
    assert layouts[2] == SparseLayout(4, False) and layouts[3] == SparseLayout(4, True)
    assert layer_layout(5, False, 4) is None


def test_rope_tables_of_a_shard_equal_the_full_tables_slice():
    grid = (3, 4, 5)
    cos, sin = rope_tables(token_positions(grid), 12)
    part_cos, part_sin = rope_tables(token_positions(grid, 17, 41), 12)
    assert torch.equal(part_cos, cos[17:41]) and torch.equal(part_sin, sin[17:41])
    assert token_positions(grid)[23].tolist() == [1, 0, 3]  # t slowest, then row, then column
