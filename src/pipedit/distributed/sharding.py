"""Splitting a dimension into per-rank shards (sequence tokens, attention heads)."""

from __future__ import annotations

from collections.abc import Sequence


def shard_sizes(total: int, parts: int) -> tuple[int, ...]:
    """Sizes of `parts` contiguous shards of `total` items, as torch.tensor_split makes them.

    The first `total % parts` shards get one extra item, e.g. shard_sizes(7, 2) == (4, 3),
    shard_sizes(24, 5) == (5, 5, 5, 5, 4). Shards may be empty when total < parts.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    base, extra = divmod(total, parts)
    return tuple(base + 1 if i < extra else base for i in range(parts))


def shard_offsets(sizes: Sequence[int]) -> tuple[int, ...]:
    """Start offset of each shard: shard_offsets((4, 3)) == (0, 4)."""
    offsets, start = [], 0
    for size in sizes:
        offsets.append(start)
        start += size
    return tuple(offsets)


def shard_range(sizes: Sequence[int], index: int) -> tuple[int, int]:
    """(start, stop) of shard `index`."""
    start = sum(sizes[:index])
    return start, start + sizes[index]


def group_sizes(sizes: Sequence[int], group: int) -> tuple[int, ...]:
    """Merge consecutive runs of `group` shards: group_sizes((3, 3, 2, 2), 2) == (6, 4)."""
    if group < 1 or len(sizes) % group:
        raise ValueError(f"cannot group {len(sizes)} shards into runs of {group}")
    return tuple(sum(sizes[i : i + group]) for i in range(0, len(sizes), group))
