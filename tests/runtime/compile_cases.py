"""Rank function of the spawned compile test (a module, so that spawned ranks can import it)."""

import torch

from pipedit.adapter import VideoShape, load_adapter
from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.runtime.compile import apply_compile
from pipedit.sampling import SamplingParams


def ulysses_eager_then_compiled(rank, world_size, checkpoint, shape: VideoShape, chunk_heads):
    """One transformer forward on a Ulysses world, eager then compiled (the worker's order:
    sequence parallel installed, then compile), on the same inputs; chunk_heads: the PipeSP
    chunk (None: synchronous Ulysses)."""
    ctx = ParallelContext.create(world_size, 1)
    adapter = load_adapter(checkpoint)
    strategy = get_attention_strategy("ulysses", ctx, num_heads=adapter.num_heads, chunk_heads=chunk_heads)
    adapter.enable_sequence_parallel(ctx, strategy)
    cond = adapter.prepare_condition(adapter.encode_prompt("a lighthouse at dusk"))
    latents = adapter.prepare_latents(shape, torch.Generator().manual_seed(5))
    timestep = adapter.make_scheduler(SamplingParams(steps=2))[1][0]
    eager = adapter.predict_noise(latents, timestep, cond, 6.0)
    apply_compile(adapter.transformer, ctx.device)
    compiled = adapter.predict_noise(latents, timestep, cond, 6.0)
    return eager, compiled
