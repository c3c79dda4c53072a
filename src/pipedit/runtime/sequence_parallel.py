"""Sequence parallelism on a worker: process groups, the attention strategy, the model hooks,
and the PipeSP chunk choice per request shape."""

from __future__ import annotations

import torch

from ..attention.aco import plan_aco
from ..attention.autotune import AttentionShape, measure_chunks, pick_faster
from ..attention.kernel_choice import ProbeShape, choose_kernels
from ..attention.registry import get_attention_strategy
from ..adapter import VideoShape
from ..config import ParallelConfig
from ..distributed.context import ParallelContext
from ..errors import UserInputError
from ..request import VideoRequest
from .layout import WorldLayout


def check_parallel_config(parallel: ParallelConfig, num_heads: int) -> None:
    """Refuses up front what cannot work: a Ulysses rank must own at least one head (heads need
    not divide evenly: 24 heads on 5 or 7 ranks are split unevenly)."""
    if parallel.ulysses > num_heads:
        ranks = parallel.ulysses * parallel.ring  # one SP group (CFG parallel runs two of them)
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
    def __init__(self, ctx: ParallelContext, strategy, parallel: ParallelConfig, dtype: torch.dtype,
                 aco_capable: bool):
        self.kernels = None  # the KernelChoice the strategy runs (set by install)
        self.ctx = ctx
        self.strategy = strategy
        self.parallel = parallel
        self.dtype = dtype
        self.aco_capable = aco_capable
        self.chosen_chunks: dict[AttentionShape, int | None] = {}  # PipeSP chunk per attention shape

    @classmethod
    def install(cls, adapter, ctx: ParallelContext, layout: WorldLayout, parallel: ParallelConfig,
                attention: str = "auto") -> "SequenceParallelRuntime | None":
        """Routes the DiT's attention through the layout's strategy, running the attention kernel
        `attention` names (auto: measured, agreed over the SP group; a collective). None when one
        rank on a CPU with auto attention and no Aco helpers: the model's own attention runs."""
        single = ctx.world_size == 1 and not layout.aco
        if single and attention == "auto" and ctx.device.type != "cuda":
            return None
        name = "local" if single else "aco" if layout.aco else strategy_name(parallel)
        fixed = parallel.pipesp_chunk
        options = {} if name in ("ring", "local") else {
            "num_heads": adapter.num_heads, "chunk_heads": fixed if isinstance(fixed, int) else None,
        }
        if layout.aco:
            options["plan"] = plan_aco(adapter.num_heads, layout.denoise_ranks, layout.decode_ranks)
        strategy = get_attention_strategy(name, ctx, **options)
        adapter.enable_sequence_parallel(ctx, strategy)
        runtime = cls(ctx, strategy, parallel, adapter.compute_dtype, layout.aco)
        runtime.kernels = choose_kernels(ctx, adapter.compute_dtype, attention, probe_shape(adapter, ctx))
        strategy.kernel.use(runtime.kernels)
        if hasattr(strategy, "lse_kernel"):
            strategy.lse_kernel.use(runtime.kernels)
        return runtime

    def prepare(self, adapter, request: VideoRequest) -> None:
        if self.parallel.pipesp_chunk == "auto":
            self.strategy.chunk_heads = self.auto_chunk(adapter, request)

    def auto_chunk(self, adapter, request: VideoRequest) -> int | None:
        """Collective: the first request of a shape measures and fixes its PipeSP chunk."""
        if self.ctx.ulysses_degree == 1:
            return None  # no Ulysses all-to-all to pipeline
        shape = adapter.attention_shape(request.shape)
        if shape not in self.chosen_chunks:
            self.chosen_chunks[shape] = pick_faster(measure_chunks(self.strategy, self.ctx, shape, self.dtype))
        return self.chosen_chunks[shape]


def probe_shape(adapter, ctx: ParallelContext) -> ProbeShape:
    """The kernel probe's call: one rank's heads and head dim at about a 480p video's share."""
    shape = adapter.attention_shape(VideoShape(480, 832, 33))
    return ProbeShape(tokens=8192, heads=max(1, shape.heads // ctx.ulysses_degree), head_dim=shape.head_dim)
