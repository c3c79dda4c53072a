from __future__ import annotations

import pytest
import torch

from pipedit.distributed.sharding import group_sizes, shard_offsets, shard_range, shard_sizes


@pytest.mark.parametrize(("total", "parts"), [(7, 2), (10, 3), (24, 5), (8, 4), (1, 3), (0, 2)])
def test_shard_sizes_follow_tensor_split(total: int, parts: int) -> None:
    expected = tuple(len(t) for t in torch.tensor_split(torch.arange(total), parts))
    assert shard_sizes(total, parts) == expected


def test_examples_from_the_spec() -> None:
    assert shard_sizes(24, 5) == (5, 5, 5, 5, 4)
    assert shard_sizes(7, 2) == (4, 3)


def test_offsets_ranges_and_groups() -> None:
    sizes = (3, 3, 2, 2)
    assert shard_offsets(sizes) == (0, 3, 6, 8)
    assert shard_range(sizes, 2) == (6, 8)
    assert group_sizes(sizes, 2) == (6, 4)
    with pytest.raises(ValueError):
        group_sizes(sizes, 3)


@pytest.mark.parametrize(("total", "parts"), [(5, 0), (-1, 2)])
def test_rejects_bad_arguments(total: int, parts: int) -> None:
    with pytest.raises(ValueError):
        shard_sizes(total, parts)
