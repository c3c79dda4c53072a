"""Aco: attention co-processing by idle decode ranks (PipeDiT §3).

After its Ulysses all-to-all a denoise rank holds the whole sequence for its local heads. With
Aco active it keeps some heads and reduces the others to the one attention-kernel problem the
call amounts to (joint text tokens appended, or a sparse layout's regrouping applied, plus the
key mask: `kernel_inputs`); it sends that point-to-point to its helper decode ranks, computes its
own heads meanwhile, receives the kernel outputs and maps them back (`split_outputs`). Helpers
run the same kernel on the same problem, so outputs equal the run without Aco, whatever the
shape of call (joint, sparse self-attention, cross-attention).

Invariant: both sides derive head counts from the same AcoPlan and buffer sizes from the header
that precedes each request; every message between a pair of ranks is matched in issue order
(one header, one request and one reply per pair per attention call). The runtime's helpers serve
a denoising step until every source sends the end-of-forward header once (AcoAttention.end_forward):
a step may run several transformer passes with different numbers of attention calls (a model's
own guidance passes), or skip its tail (a step cache).

Hazard (NCCL): a process group's batched P2P ops run on one stream in issue order. Posting
helper B's header after helper A's request and reply would make B wait for A's reply, i.e. for
A's compute; so each side posts all its headers in one batch, then all requests and replies in
one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipedit.attention.base import kernel_inputs, split_outputs
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.usp import UlyssesAttention
from pipedit.distributed import deadline, p2p
from pipedit.distributed.rank_state import RankState
from pipedit.distributed.sharding import shard_sizes


@dataclass(frozen=True)
class AcoShape:
    """One request's attention call as the scheduler keys its Aco decision by. Helpers read only
    head_dim and dtype from it: each request's buffer sizes come from the header sent before it."""

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


HEADER_FIELDS = 4  # (batch, query tokens, key tokens, masked) of one kernel problem
# A header of zeros ends a forward early (a step cache skipped the blocks after it): no kernel
# problem has zero queries, so it cannot be mistaken for one.
END_OF_FORWARD = (0,) * HEADER_FIELDS


def _pack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _unpack(flat: torch.Tensor, shapes: Sequence[tuple[int, ...]]) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in shapes:
        size = int(torch.Size(shape).numel())
        out.append(flat[start : start + size].view(shape))
        start += size
    return out


def _request_shapes(header: Sequence[int], heads: int, head_dim: int) -> list[tuple[int, ...]]:
    batch, queries, keys, masked = header
    shapes = [(batch, queries, heads, head_dim), (batch, keys, heads, head_dim), (batch, keys, heads, head_dim)]
    return shapes + [(batch, keys)] if masked else shapes


class AcoAttention(UlyssesAttention):
    """Ulysses attention whose local heads are shared with helper decode ranks while `active`.
    PipeSP chunking is suspended while active: one request per helper per attention call."""

    name = "aco"

    def __init__(self, ctx, *, plan: AcoPlan, num_heads: int, chunk_heads: int | None = None,
                 backend: str = "auto") -> None:
        self.active = False
        self._ended = False  # this forward's end-of-forward header is sent
        super().__init__(ctx, chunk_heads=chunk_heads, backend=backend, num_heads=num_heads)
        self.offloads = plan.offloads[ctx.rank]
        # Header tensors by value, built once: building one per call from a Python list is a
        # pageable host-to-device copy, i.e. a stream sync, on every attention call. Never
        # written after creation (they are only sent).
        self._headers: dict[tuple[int, ...], torch.Tensor] = {}

    def _header(self, pq: torch.Tensor, pk: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        values = (pq.shape[0], pq.shape[1], pk.shape[1], int(mask is not None))
        if values not in self._headers:
            self._headers[values] = torch.tensor(values, dtype=torch.int64, device=pq.device)
        return self._headers[values]

    def set_active(self, active: bool) -> None:
        """Helpers serve this rank's offloaded heads from now (a forward begins) until its
        end_forward; False: every head is computed here."""
        self.active = active
        self._ended = False

    def end_forward(self) -> None:
        """This forward makes no more attention calls (a step cache skips the rest, or the step's
        passes are done): tells every helper, which then stops serving it. Sent once per forward;
        a no-op while inactive (helpers serve no forward)."""
        if not self.active or not self.offloads or self._ended:
            return
        self._ended = True
        device = self.ctx.device
        if END_OF_FORWARD not in self._headers:
            self._headers[END_OF_FORWARD] = torch.tensor(list(END_OF_FORWARD), dtype=torch.int64, device=device)
        end = self._headers[END_OF_FORWARD]
        p2p.post(sends=[(end, helper) for helper, _ in self.offloads], op="Aco end-of-forward send",
                 state=self.ctx.state).wait()

    @property
    def chunk_heads(self) -> int | None:
        return None if self.active else self._chunk_heads

    @chunk_heads.setter
    def chunk_heads(self, value: int | None) -> None:
        UlyssesAttention.chunk_heads.fset(self, value)

    def _core(self, q, k, v, joint, plan, layout=None):
        if not self.active or not self.offloads:
            return super()._core(q, k, v, joint, plan, layout)
        keep = q.shape[2] - sum(n for _, n in self.offloads)
        problems, start = [], keep  # (helper, header, request, reply, first head, heads)
        for helper, heads in self.offloads:
            part = slice(start, start + heads)
            pq, pk, pv, mask = kernel_inputs(q[:, :, part], None if k is None else k[:, :, part],
                                             None if v is None else v[:, :, part],
                                             None if joint is None else joint.heads(start, start + heads), layout)
            request = _pack([pq, pk, pv] + ([] if mask is None else [mask.to(q.dtype)]))
            reply = q.new_empty(pq.shape[0], pq.shape[1], heads, pv.shape[3])
            problems.append((helper, self._header(pq, pk, mask), request, reply, start, heads))
            start += heads
        # Posted before the local heads compute, which they overlap. Headers first, in their own
        # batch: a helper sizes each request's buffer from its header (see the module's hazard).
        transfers = (
            p2p.post(sends=[(header, helper) for helper, header, *_ in problems], op="Aco header send",
                     state=self.ctx.state),
            p2p.post(sends=[(request, helper) for helper, _, request, *_ in problems],
                     recvs=[(reply, helper) for helper, _, _, reply, *_ in problems], op="Aco heads exchange",
                     state=self.ctx.state),
        )
        local_joint = None if joint is None else joint.heads(0, keep)
        local_k, local_v = (None if t is None else t[:, :, :keep] for t in (k, v))
        out, text_out = super()._core(q[:, :, :keep], local_k, local_v, local_joint, plan, layout)
        outs, text_outs = [out], [text_out]
        for transfer in transfers:
            transfer.wait()
        for _, _, _, reply, first, heads in problems:
            part_joint = None if joint is None else joint.heads(first, first + heads)
            remote, remote_text = split_outputs(reply, q.shape[1], part_joint, layout)
            outs.append(remote)
            text_outs.append(remote_text)
        text = None if text_out is None else torch.cat(text_outs, dim=2)
        return torch.cat(outs, dim=2), text


def serve_aco_calls(pairs: list[tuple[int, int]], shape: AcoShape, calls: int | None, kernel: AttentionKernel,
                    device: torch.device, state: RankState | None = None) -> int:
    """Helper side: answer up to `calls` attention calls (None: until the end-of-forward header),
    each with one request per (source, heads); returns the calls served. Each request is one attention-kernel problem (the denoise
    rank has already applied its joint text tokens and sparse layout), so every shape of call is
    served alike. An END_OF_FORWARD header from every source ends the forward early. `state`: the
    helper rank's (fault points, operation deadline)."""
    served = 0
    while calls is None or served < calls:
        headers = [(src, heads, torch.empty(HEADER_FIELDS, dtype=torch.int64, device=device)) for src, heads in pairs]
        # Read on the host below; a late wake-up here delays the denoise ranks' attention call.
        p2p.post(recvs=[(header, src) for src, _, header in headers],
                 op="Aco header receive", state=state).wait(host=True, max_sleep=deadline.LATENCY_POLL_S)
        values = [tuple(header.tolist()) for _, _, header in headers]
        if _ends_forward(values, [src for src, _ in pairs]):
            return served
        inbox = []
        for (src, heads, _), header in zip(headers, values):
            shapes = _request_shapes(header, heads, shape.head_dim)
            buffer = torch.empty(sum(int(torch.Size(s).numel()) for s in shapes), dtype=shape.dtype, device=device)
            inbox.append((src, shapes, buffer))
        p2p.post(recvs=[(buffer, src) for src, _, buffer in inbox], op="Aco request receive", state=state).wait()
        replies = []
        for src, shapes, buffer in inbox:
            q, k, v, *mask = _unpack(buffer, shapes)
            replies.append((kernel(q, k, v, mask[0] > 0.5 if mask else None).contiguous(), src))
        p2p.post(sends=replies, op="Aco reply send", state=state).wait()
        served += 1
    return served


def _ends_forward(headers: list[tuple[int, ...]], sources: list[int]) -> bool:
    """Whether every source ended the forward; a mix means the denoise ranks disagreed on a
    step cache decision (their shards would diverge): fail loudly rather than hang."""
    ended = [h == END_OF_FORWARD for h in headers]
    if any(ended) and not all(ended):
        raise RuntimeError(f"Aco helper: denoise ranks {[s for s, e in zip(sources, ended) if e]} ended the forward "
                           f"while {[s for s, e in zip(sources, ended) if not e]} went on: their step cache "
                           f"decisions disagree")
    return all(ended)
