"""Ring attention: K/V blocks circulate over the ring group, partials merge by online softmax.

Invariants:
- Text keys/values are never circulated: each rank attends them once, as its own partial.
- Text queries attend every video block on every rank (text is short). Their partials are kept
  per source block and merged in a fixed order (text keys, then block 0, 1, ...) so that every
  rank produces bit-identical text outputs; merging in arrival order would not.
- Block sizes are known on every rank, so an empty block is skipped by sender and receiver alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from pipedit.attention.base import JointTokens
from pipedit.attention.kernels import LseKernel, merge_partials
from pipedit.distributed.collectives import Pending, ProcessGroup
from pipedit.distributed.p2p import exchange_async
from pipedit.distributed.rank_state import RankState

Partial = tuple[torch.Tensor, torch.Tensor]  # (out [B, H, N, D] fp32, lse [B, H, N] fp32)


@dataclass(frozen=True)
class RingSpec:
    rank: int  # position in the ring
    peers: tuple[int, ...]  # global ranks in ring order
    group: ProcessGroup | None
    block_sizes: tuple[int, ...]  # sequence length held by each ring position
    state: RankState | None = field(default=None, compare=False)  # this rank's, for its transfers


def ring_attention(
    kernel: LseKernel,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    joint: JointTokens | None,
    ring: RingSpec,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q, k, v: [B, block_sizes[rank], h, D]. Returns (video out, text out [B, L, h, D] | None)."""
    q_t = q.transpose(1, 2)
    video = _Running()
    text_keys: Partial | None = None
    text_blocks: list[Partial | None] = [None] * len(ring.block_sizes)
    for source, k_block, v_block in _circulate(k, v, ring):
        # Every step (the first included) computes while the next block is already in flight.
        if joint is not None and source == ring.rank:
            text_keys = _attend_text_keys(kernel, q_t, joint, video)
        video.add(kernel(q_t, k_block, v_block))
        if joint is not None and joint.q is not None:
            text_blocks[source] = kernel(joint.q.transpose(1, 2), k_block, v_block)
    out = video.result().transpose(1, 2).to(q.dtype)
    if text_keys is None:
        return out, None
    text = _Running()
    for part in (text_keys, *text_blocks):
        text.add(part)  # type: ignore[arg-type]
    return out, text.result().transpose(1, 2).to(q.dtype)


def _attend_text_keys(
    kernel: LseKernel, q_t: torch.Tensor, joint: JointTokens, video: _Running
) -> Partial | None:
    """Text keys, counted once on this rank: add the video queries' partial, return the text's
    (None without text queries)."""
    text_k, text_v = joint.k.transpose(1, 2), joint.v.transpose(1, 2)
    video.add(kernel(q_t, text_k, text_v, joint.kv_mask))
    if joint.q is None:
        return None
    return kernel(joint.q.transpose(1, 2), text_k, text_v, joint.kv_mask)


class _Running:
    """Running online-softmax merge of partials."""

    def __init__(self) -> None:
        self.partial: Partial | None = None

    def add(self, part: Partial) -> None:
        self.partial = part if self.partial is None else merge_partials(*self.partial, *part)

    def result(self) -> torch.Tensor:
        assert self.partial is not None
        return self.partial[0]


def _circulate(
    k: torch.Tensor, v: torch.Tensor, ring: RingSpec
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Yield (source position, K, V [B, h, N, D]) for every block; the next block's transfer is
    posted before the current one is yielded and waited for only when the caller is done."""
    size = len(ring.block_sizes)
    send_to = ring.peers[(ring.rank + 1) % size]
    recv_from = ring.peers[(ring.rank - 1) % size]
    block = torch.stack([k, v]).contiguous()  # [2, B, N, h, D]: one message per step
    source = ring.rank
    for step in range(size):
        pending: Pending[torch.Tensor | None] | None = None
        if step < size - 1:
            nxt = (source - 1) % size
            incoming = block.new_empty(2, k.shape[0], ring.block_sizes[nxt], *k.shape[2:])
            pending = exchange_async(
                block if block.numel() else None,
                send_to,
                incoming if incoming.numel() else None,
                recv_from,
                ring.group,
                ring.state,
            )
        yield source, block[0].transpose(1, 2), block[1].transpose(1, 2)
        if pending is not None:
            pending.wait()
            block, source = incoming, nxt
