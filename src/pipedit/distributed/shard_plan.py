"""Sequence sharding applied to a model from outside, with forward hooks.

A plan names modules by their path in the model: the outputs of `split` modules are cut along a
dim and each rank keeps its shard (tuple outputs: every element); the outputs of `gather` modules
are all-gathered back to the full sequence. The model's own forward is untouched, in the spirit
of diffusers' `_cp_plan`, but with uneven shards and an explicit context.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .collectives import all_gather_async
from .context import ParallelContext
from .sharding import shard_range, shard_sizes


@dataclass(frozen=True)
class SequenceShardPlan:
    split: dict[str, int] = field(default_factory=dict)  # module path -> sequence dim of its output(s)
    gather: dict[str, int] = field(default_factory=dict)  # module path -> sequence dim to all-gather
    # module path -> sequence dim of its first positional input, cut before the module runs (for a
    # sequence the model builds inline, e.g. a reshape between two modules)
    split_input: dict[str, int] = field(default_factory=dict)


@dataclass
class SequenceShards:
    """Per-rank sequence lengths of the current forward, set by the split hooks and read by the
    attention processors. Invariant: every split module of one forward sees the same total."""

    sizes: tuple[int, ...] = ()


def split_sequence(tensor: torch.Tensor, dim: int, ctx: ParallelContext, shards: SequenceShards) -> torch.Tensor:
    """This rank's contiguous shard of `tensor` along `dim`; records every rank's size in `shards`."""
    shards.sizes = shard_sizes(tensor.shape[dim], ctx.world_size)
    start, stop = shard_range(shards.sizes, ctx.rank)
    return tensor.narrow(dim, start, stop - start).contiguous()


def gather_sequence(tensor: torch.Tensor, dim: int, ctx: ParallelContext, sizes: tuple[int, ...]) -> torch.Tensor:
    """All-gather uneven shards along `dim`: pad each to the longest, gather, trim, concatenate."""
    longest = max(sizes)
    padding = longest - tensor.shape[dim]
    if padding:
        pad_shape = list(tensor.shape)
        pad_shape[dim] = padding
        tensor = torch.cat([tensor, tensor.new_zeros(pad_shape)], dim=dim)
    parts = all_gather_async(tensor, ctx.sp_group, ctx.state).wait()
    return torch.cat([part.narrow(dim, 0, size) for part, size in zip(parts, sizes)], dim=dim)


def apply_shard_plan(model: nn.Module, plan: SequenceShardPlan, ctx: ParallelContext) -> SequenceShards:
    """Installs the hooks; returns the shared SequenceShards the attention processors read."""
    shards = SequenceShards()
    modules = dict(model.named_modules())
    for path in [*plan.split, *plan.gather, *plan.split_input]:
        if path not in modules:
            raise ValueError(f"shard plan names module '{path}', which {type(model).__name__} does not have")

    def split_hook(dim):
        def hook(module, args, output):
            if isinstance(output, tuple):
                return tuple(split_sequence(t, dim, ctx, shards) for t in output)
            return split_sequence(output, dim, ctx, shards)
        return hook

    def gather_hook(dim):
        return lambda module, args, output: gather_sequence(output, dim, ctx, shards.sizes)

    for path, dim in plan.split.items():
        modules[path].register_forward_hook(split_hook(dim))
    def split_input_hook(dim):
        return lambda module, args: (split_sequence(args[0], dim, ctx, shards), *args[1:])

    for path, dim in plan.gather.items():
        modules[path].register_forward_hook(gather_hook(dim))
    for path, dim in plan.split_input.items():
        modules[path].register_forward_pre_hook(split_input_hook(dim))
    return shards
