"""Sequence parallelism on a worker: process groups, the attention strategy, the model hooks,
and the PipeSP chunk choice per request shape."""

from __future__ import annotations

import torch

from ..attention.autotune import measure_chunks, pick_chunk
from ..attention.registry import get_attention_strategy
from ..config import ParallelConfig
from ..distributed.context import ParallelContext
from ..errors import UserInputError
from ..request import VideoRequest


def check_parallel_config(parallel: ParallelConfig, num_heads: int) -> None:
    """Refuses up front what cannot work: a Ulysses rank must own at least one head (heads need
    not divide evenly: 24 heads on 5 or 7 ranks are split unevenly)."""
    if parallel.ulysses > num_heads:
        ranks = parallel.denoise_ranks
        valid = [f"--ulysses {u} --ring {ranks // u}" for u in range(1, num_heads + 1) if ranks % u == 0]
        raise UserInputError(
            f"--ulysses {parallel.ulysses} exceeds the model's {num_heads} attention heads (a Ulysses rank "
            f"must own a head); for {ranks} ranks use one of: {', '.join(valid)}"
        )


def strategy_name(parallel: ParallelConfig) -> str:
    if parallel.ring == 1:
        return "ulysses"
    return "ring" if parallel.ulysses == 1 else "usp"


class SequenceParallelRuntime:
    def __init__(self, ctx: ParallelContext, strategy, parallel: ParallelConfig, dtype: torch.dtype):
        self.ctx = ctx
        self.strategy = strategy
        self.parallel = parallel
        self.dtype = dtype
        self.chosen_chunks: dict[tuple, int | None] = {}  # attention shape -> PipeSP chunk

    @classmethod
    def install(cls, adapter, parallel: ParallelConfig, device: torch.device) -> "SequenceParallelRuntime":
        ctx = ParallelContext.create(parallel.ulysses, parallel.ring, device=device)
        name = strategy_name(parallel)
        options = {}
        if name != "ring":
            fixed = parallel.pipesp_chunk
            options = {"num_heads": adapter.num_heads, "chunk_heads": fixed if isinstance(fixed, int) else None}
        strategy = get_attention_strategy(name, ctx, **options)
        adapter.enable_sequence_parallel(ctx, strategy)
        return cls(ctx, strategy, parallel, adapter.dtype)

    def prepare(self, adapter, request: VideoRequest) -> None:
        if self.parallel.pipesp_chunk == "auto":
            self.strategy.chunk_heads = self.auto_chunk(adapter, request)

    def auto_chunk(self, adapter, request: VideoRequest) -> int | None:
        """Collective: the first request of a shape measures and fixes its PipeSP chunk."""
        if self.parallel.ulysses == 1:
            return None  # no Ulysses all-to-all to pipeline
        shape = adapter.attention_shape(request.shape)
        key = tuple(vars(shape).values())
        if key not in self.chosen_chunks:
            self.chosen_chunks[key] = pick_chunk(measure_chunks(self.strategy, self.ctx, shape, self.dtype))
        return self.chosen_chunks[key]
