"""Point-to-point transfers, in one form everywhere: batched (`dist.batch_isend_irecv`).

Hazard (NCCL): a batched P2P op runs on the process group's communicator, while a single
dist.send / recv / isend / irecv runs on a separate two-rank communicator that NCCL creates for
the pair. A send posted in one form is never matched by a receive posted in the other, so the
exchange hangs. gloo has no such split, so CPU tests cannot show it. Therefore every
point-to-point transfer in pipedit, on both sides of every exchange (ring K/V, Aco heads, latent
handoff), goes through `post`; a test checks that no other module calls the single forms.

Between one pair of ranks, messages are matched in the order they are posted.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from .collectives import Pending, ProcessGroup, op_deadline
from .rank_state import RankState

Transfer = tuple[torch.Tensor, int]  # (tensor, peer's global rank)


def post(sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = (),
         group: ProcessGroup | None = None, op: str = "p2p", state: RankState | None = None) -> Pending[None]:
    """Start the sends and receives (peers are global ranks); .wait() returns when all are done.
    Received tensors are filled in place; every tensor stays referenced until wait(). `op`
    names the transfer in deadline errors (e.g. "latent handoff"); `state`: the posting rank's
    (fault points, deadline; None: neither)."""
    ops = [dist.P2POp(dist.isend, tensor, peer, group) for tensor, peer in sends]
    ops += [dist.P2POp(dist.irecv, tensor, peer, group) for tensor, peer in recvs]
    if ops and state is not None:
        state.faults.check(op="p2p")
    works = dist.batch_isend_irecv(ops) if ops else []
    peers = [peer for _, peer in (*sends, *recvs)]
    return Pending(works, lambda: None, [tensor for tensor, _ in (*sends, *recvs)], op, peers, op_deadline(state))


def exchange_async(
    send: torch.Tensor | None,
    dst: int,
    recv: torch.Tensor | None,
    src: int,
    group: ProcessGroup | None,
    state: RankState | None = None,
) -> Pending[torch.Tensor | None]:
    """Send `send` to global rank dst while receiving into `recv` from global rank src (ring step).

    Either side may be None (nothing to move, e.g. an empty sequence block): both peers know
    block sizes in advance, so they skip consistently.
    """
    sends = [(send, dst)] if send is not None else []
    recvs = [(recv, src)] if recv is not None else []
    return post(sends, recvs, group, op="ring K/V exchange", state=state).then(lambda _: recv)
