"""Run on spawned gloo ranks by test_kernel_choice.py (importable by the children)."""

from __future__ import annotations

from pipedit.attention.kernel_choice import choose_kernels
from pipedit.distributed.context import ParallelContext

# Per rank, fake ms per kernel: rank 0 alone would pick sdpa-flash (1.0), rank 1 alone sdpa (2.0);
# the slowest rank's times are sdpa 3.0 and sdpa-flash 2.5, so both must run sdpa-flash.
FAKE_MS = ({"sdpa": 3.0, "sdpa-flash": 1.0}, {"sdpa": 2.0, "sdpa-flash": 2.5})


def agree_on_kernels(rank: int, world_size: int) -> dict:
    ctx = ParallelContext.create(world_size, 1)
    mine = FAKE_MS[rank]
    local_pick = min(mine, key=mine.get)
    import torch

    choice = choose_kernels(ctx, torch.float32, measure=lambda form, entry: mine[entry.name])
    return {"plain": choice.plain, "lse": choice.lse, "local_pick": local_pick}
