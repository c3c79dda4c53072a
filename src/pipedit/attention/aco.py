"""Aco: attention co-processing by idle decode ranks (PipeDiT §3).

After its Ulysses all-to-all a denoise rank holds the whole sequence for its local heads. With
Aco active it keeps some heads, sends the q/k/v of the others (video and text, plus the text key
mask) point-to-point to its helper decode ranks, computes its own heads meanwhile, and receives
the helpers' outputs. Helpers run the same joint attention on the heads they got, so outputs
equal the run without Aco.

Invariant: both sides derive the message layout from the same AcoPlan and AcoShape, and every
message between a pair of ranks is matched in issue order (one request and one reply per pair
per attention call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipedit.attention.base import JointTokens, joint_attention
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.usp import UlyssesAttention
from pipedit.distributed import p2p
from pipedit.distributed.sharding import shard_sizes


@dataclass(frozen=True)
class AcoShape:
    """What a helper needs to size its buffers: one attention call of one request."""

    seq_len: int  # video tokens of the whole sequence (a Ulysses rank holds all of them)
    text_len: int
    head_dim: int
    dtype: torch.dtype
    batch: int = 1


@dataclass(frozen=True)
class AcoPlan:
    """offloads[i] = ((helper global rank, heads), ...) for denoise sp rank i, in send order."""

    denoise_ranks: tuple[int, ...]  # global ranks, sp order
    offloads: tuple[tuple[tuple[int, int], ...], ...]

    def served_by(self, helper: int) -> list[tuple[int, int]]:
        """(denoise global rank, heads) pairs a helper serves, in the order it must receive."""
        return [(self.denoise_ranks[i], n) for i, pairs in enumerate(self.offloads) for h, n in pairs if h == helper]


def plan_aco(num_heads: int, denoise_ranks: Sequence[int], decode_ranks: Sequence[int]) -> AcoPlan:
    """Balance heads by rank count. With at least as many helpers as denoise ranks, each denoise
    rank splits its heads evenly with its own helpers. Otherwise helper j serves the denoise ranks
    i with i % len(decode_ranks) == j and takes heads one at a time from the busiest of them while
    that lowers the busiest load (uneven head counts need no padding: 24 heads on 7+1 ranks end
    at 3 heads each)."""
    heads = list(shard_sizes(num_heads, len(denoise_ranks)))
    d, v = len(denoise_ranks), len(decode_ranks)
    taken: list[dict[int, int]] = [{} for _ in range(d)]
    if v >= d:
        for i in range(d):
            helpers = [decode_ranks[j] for j in range(v) if j % d == i]
            for helper, n in zip(helpers, shard_sizes(heads[i], len(helpers) + 1)[1:]):
                taken[i][helper] = n
    else:
        for j, helper in enumerate(decode_ranks):
            served, load = list(range(j, d, v)), 0
            while True:
                busiest = max(served, key=lambda i: heads[i] - sum(taken[i].values()))
                remaining = heads[busiest] - sum(taken[busiest].values())
                if load + 1 > remaining - 1:
                    break
                taken[busiest][helper] = taken[busiest].get(helper, 0) + 1
                load += 1
    offloads = tuple(tuple((h, n) for h, n in t.items() if n > 0) for t in taken)
    return AcoPlan(tuple(denoise_ranks), offloads)


def _request_numel(shape: AcoShape, heads: int) -> int:
    video = shape.batch * shape.seq_len * heads * shape.head_dim
    text = shape.batch * shape.text_len * heads * shape.head_dim
    return 3 * video + 3 * text + shape.batch * shape.text_len


def _reply_numel(shape: AcoShape, heads: int) -> int:
    return shape.batch * (shape.seq_len + shape.text_len) * heads * shape.head_dim


def _pack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _unpack(flat: torch.Tensor, shapes: Sequence[tuple[int, ...]]) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in shapes:
        size = int(torch.Size(shape).numel())
        out.append(flat[start : start + size].view(shape))
        start += size
    return out


def _request_shapes(shape: AcoShape, heads: int) -> list[tuple[int, ...]]:
    video = (shape.batch, shape.seq_len, heads, shape.head_dim)
    text = (shape.batch, shape.text_len, heads, shape.head_dim)
    return [video] * 3 + [text] * 3 + [(shape.batch, shape.text_len)]


def _reply_shapes(shape: AcoShape, heads: int) -> list[tuple[int, ...]]:
    return [(shape.batch, shape.seq_len, heads, shape.head_dim), (shape.batch, shape.text_len, heads, shape.head_dim)]


class AcoAttention(UlyssesAttention):
    """Ulysses attention whose local heads are shared with helper decode ranks while `active`.
    PipeSP chunking is suspended while active: one request per helper per attention call."""

    name = "aco"

    def __init__(self, ctx, *, plan: AcoPlan, num_heads: int, chunk_heads: int | None = None,
                 backend: str = "auto") -> None:
        self.active = False
        super().__init__(ctx, chunk_heads=chunk_heads, backend=backend, num_heads=num_heads)
        self.offloads = plan.offloads[ctx.rank]

    @property
    def chunk_heads(self) -> int | None:
        return None if self.active else self._chunk_heads

    @chunk_heads.setter
    def chunk_heads(self, value: int | None) -> None:
        UlyssesAttention.chunk_heads.fset(self, value)

    def _core(self, q, k, v, joint, plan):
        if not self.active or not self.offloads:
            return super()._core(q, k, v, joint, plan)
        if joint is None:
            raise ValueError("Aco expects joint text tokens (HunyuanVideo-style joint attention)")
        shape = AcoShape(q.shape[1], joint.q.shape[1], q.shape[3], q.dtype, q.shape[0])
        keep = q.shape[2] - sum(n for _, n in self.offloads)
        replies, start = [], keep
        for helper, heads in self.offloads:
            part = slice(start, start + heads)
            mask = joint.kv_mask if joint.kv_mask is not None else q.new_ones(shape.batch, shape.text_len, dtype=torch.bool)
            request = _pack([q[:, :, part], k[:, :, part], v[:, :, part], joint.q[:, :, part],
                             joint.k[:, :, part], joint.v[:, :, part], mask.to(q.dtype)])
            reply = q.new_empty(_reply_numel(shape, heads))
            # Both are posted before the local heads compute, which they overlap.
            replies.append((p2p.post(sends=[(request, helper)], recvs=[(reply, helper)], op="Aco heads exchange"),
                            reply, heads))
            start += heads
        out, text_out = super()._core(q[:, :, :keep], k[:, :, :keep], v[:, :, :keep], joint.heads(0, keep), plan)
        outs, text_outs = [out], [text_out]
        for transfer, reply, heads in replies:
            transfer.wait()
            remote, remote_text = _unpack(reply, _reply_shapes(shape, heads))
            outs.append(remote)
            text_outs.append(remote_text)
        return torch.cat(outs, dim=2), torch.cat(text_outs, dim=2)


def serve_aco_calls(pairs: list[tuple[int, int]], shape: AcoShape, calls: int, kernel: AttentionKernel,
                    device: torch.device) -> None:
    """Helper side: answer `calls` attention calls, each with one request per (source, heads)."""
    for _ in range(calls):
        inbox = [(src, heads, torch.empty(_request_numel(shape, heads), dtype=shape.dtype, device=device))
                 for src, heads in pairs]
        # One batch per source, so each request is answered as soon as it is in.
        receives = [p2p.post(recvs=[(buffer, src)], op="Aco request receive") for src, _, buffer in inbox]
        sends = []
        for (src, heads, buffer), receive in zip(inbox, receives):
            receive.wait(host=True)  # the mask is read on the host below
            q, k, v, tq, tk, tv, mask = _unpack(buffer, _request_shapes(shape, heads))
            valid = mask > 0.5
            # An all-valid mask is dropped so that the unmasked (fastest) kernel runs.
            joint = JointTokens(tq, tk, tv, None if bool(valid.all()) else valid)
            out, text_out = joint_attention(kernel, q, k, v, joint)
            sends.append(p2p.post(sends=[(_pack([out, text_out]), src)], op="Aco reply send"))
        for send in sends:
            send.wait()
