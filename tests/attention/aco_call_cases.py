"""Worker for Aco across call shapes: one forward's calls are joint, sparse (TokenLayout) and
cross-attention in turn; the helpers serve them all from the request headers alone."""

import torch
from skip_layout import SkipLayout

from pipedit.attention.aco import AcoShape, plan_aco, serve_aco_calls
from pipedit.attention.base import JointTokens
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import shard_range, shard_sizes

HEADS, DIM, SEQ, TEXT = 7, 8, 13, 5
KINDS = ("joint", "sparse-single", "sparse-group", "cross", "self")


def _call(kind: str, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, SEQ, HEADS, DIM, generator=gen) for _ in range(3))
    tq, tk, tv = (torch.randn(2, TEXT, HEADS, DIM, generator=gen) for _ in range(3))
    mask = torch.ones(2, TEXT, dtype=torch.bool)
    mask[1, 2:] = False
    if kind == "joint":
        return (q, k, v), {"joint": JointTokens(tq, tk, tv, mask)}
    if kind == "cross":
        return (q, None, None), {"joint": JointTokens(k=tk, v=tv, kv_mask=mask)}
    if kind == "self":
        return (q, k, v), {}
    return (q, k, v), {"layout": SkipLayout(2, group=kind == "sparse-group")}


def aco_call_worker(rank, world_size, denoise, chunk_heads):
    denoise_ranks, decode_ranks = list(range(denoise)), list(range(denoise, world_size))
    ctx = ParallelContext.create(denoise, 1, ranks=denoise_ranks)
    plan = plan_aco(HEADS, denoise_ranks, decode_ranks)
    if ctx is None:  # a decode rank: the helper side (SEQ/TEXT in the shape are not read)
        serve_aco_calls(plan.served_by(rank), AcoShape(0, 0, DIM, torch.float32), len(KINDS),
                        AttentionKernel(), torch.device("cpu"))
        return {"helper_heads": sum(n for _, n in plan.served_by(rank))}
    strategy = get_attention_strategy("aco", ctx, plan=plan, num_heads=HEADS, chunk_heads=chunk_heads)
    sizes = shard_sizes(SEQ, denoise)
    start, stop = shard_range(sizes, rank)
    reference = get_attention_strategy("local", ParallelContext.single())
    errors = {}
    strategy.active = True
    for seed, kind in enumerate(KINDS):
        (q, k, v), extra = _call(kind, seed)
        ref_out, ref_text = reference(q, k, v, shard_sizes=(SEQ,), **extra)
        local = [None if t is None else t[:, start:stop] for t in (q, k, v)]
        out, text = strategy(*local, shard_sizes=sizes, **extra)
        err = (out - ref_out[:, start:stop]).abs().max().item()
        if kind == "joint":
            err = max(err, (text - ref_text).abs().max().item())
        else:
            assert text is None
        errors[kind] = err
    return {"errors": errors, "offloads": plan.offloads[rank]}
