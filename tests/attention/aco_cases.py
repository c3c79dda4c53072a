"""Worker for the spawned Aco ranks (a module, so that spawn can pickle it)."""

import torch

from pipedit.attention.aco import AcoShape, plan_aco, serve_aco_calls
from pipedit.attention.base import JointTokens
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.distributed.sharding import shard_range, shard_sizes

HEADS, DIM, SEQ, TEXT = 6, 8, 11, 4  # 6 heads: every denoise rank offloads in each layout
CALLS = 2  # attention calls served in a row, as in one transformer forward


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    video = [torch.randn(1, SEQ, HEADS, DIM, generator=gen) for _ in range(3)]
    text = [torch.randn(1, TEXT, HEADS, DIM, generator=gen) for _ in range(3)]
    mask = torch.tensor([[True, True, True, False]])
    return video, text, mask


def _record_posts(posts: list) -> None:
    """Logs each batched P2P post of this rank: (op, peers sent to, peers received from, the id
    of every tensor sent). The sent tensors are kept alive, so an id is never reused."""
    from pipedit.distributed import p2p

    original, sent = p2p.post, []

    def post(sends=(), recvs=(), group=None, op="p2p", state=None):
        sent.extend(t for t, _ in sends)
        posts.append((op, [peer for _, peer in sends], [peer for _, peer in recvs], [id(t) for t, _ in sends]))
        return original(sends, recvs, group, op, state)

    p2p.post = post


def aco_worker(rank, world_size, denoise):
    posts = []
    _record_posts(posts)
    denoise_ranks, decode_ranks = list(range(denoise)), list(range(denoise, world_size))
    ctx = ParallelContext.create(denoise, 1, ranks=denoise_ranks)
    plan = plan_aco(HEADS, denoise_ranks, decode_ranks)
    if ctx is None:  # a decode rank: the helper side
        shape = AcoShape(SEQ, TEXT, DIM, torch.float32)
        serve_aco_calls(plan.served_by(rank), shape, CALLS, AttentionKernel(), torch.device("cpu"))
        return {"helper_heads": sum(n for _, n in plan.served_by(rank)), "posts": posts}
    strategy = get_attention_strategy("aco", ctx, plan=plan, num_heads=HEADS)
    sizes = shard_sizes(SEQ, denoise)
    start, stop = shard_range(sizes, rank)
    errors = []
    for call in range(CALLS):
        (q, k, v), (tq, tk, tv), mask = _inputs(call)
        reference = get_attention_strategy("local", ParallelContext.single())
        ref_out, ref_text = reference(q, k, v, shard_sizes=(SEQ,), joint=JointTokens(tq, tk, tv, mask))
        strategy.active = True
        out, text = strategy(q[:, start:stop], k[:, start:stop], v[:, start:stop], shard_sizes=sizes,
                             joint=JointTokens(tq, tk, tv, mask))
        errors.append(max((out - ref_out[:, start:stop]).abs().max().item(), (text - ref_text).abs().max().item()))
    return {"max_error": max(errors), "offloads": plan.offloads[rank], "posts": posts}
