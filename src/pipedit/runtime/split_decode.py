"""One video's decode shared by the whole decode group (DeDiVAE's decode ranks).

The model family cuts the decode into units (HunyuanVideo: the temporal chunks x spatial tiles of
diffusers' decode; OpenSoraPlan: row bands with a halo) and says how to put them together again
(a `SplitPlan`). This module does the family-free part on every decode rank:

1. the lead decode rank (the first) holds the latents (received from denoise rank 0, as for a
   decode of its own) and broadcasts its decode mode and the latents in the decode group;
2. every rank builds the same plan from the same latents and mode, and the same owner of each unit
   (`assign`: deterministic, so no rank needs to be told);
3. each rank decodes its units; the others send theirs to the lead (batched P2P, both sides
   posting in unit order); the lead assembles the video.

Hazard (deadlines): a transfer's operation deadline counts from when it was posted, so the lead
posts its receives only after decoding its own share: the wait is then the imbalance between the
shares, not a whole share's decode time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist

from ..distributed import p2p
from ..distributed.collectives import Pending, ProcessGroup
from ..distributed.rank_state import RankState


class SplitPlan(Protocol):
    """A video's decode cut into units; every rank builds the same plan from the same input."""

    costs: list[float]  # relative work per unit (balances the shares)

    def output_shape(self, unit: int) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> torch.dtype: ...

    def decode_unit(self, unit: int) -> torch.Tensor: ...

    def assemble(self, pieces: list[torch.Tensor]) -> torch.Tensor:
        """Every unit's output, in unit order -> frames [B, F, H, W, 3] in [0, 1]."""


@dataclass(frozen=True)
class DecodeGroup:
    """The decode ranks (global ranks, the lead first), their process group, and this rank's
    state (fault points, operation deadline) for the group's transfers."""

    ranks: tuple[int, ...]
    group: ProcessGroup
    state: RankState

    @property
    def lead(self) -> int:
        return self.ranks[0]


def make_decode_group(decode_ranks: tuple[int, ...], enabled: bool, state: RankState) -> DecodeGroup | None:
    """Collective on EVERY rank of the world (dist.new_group must be entered by all ranks in the
    same order), also those outside the group; None where splits are off or there is one rank."""
    if not enabled or len(decode_ranks) < 2:
        return None
    group = dist.new_group(list(decode_ranks))
    return DecodeGroup(tuple(decode_ranks), group, state)


def assign(costs: list[float], parts: int) -> list[int]:
    """The owner (0..parts-1) of each unit: the costliest unit first, to the least loaded part
    (ties: the lower part). Deterministic: every rank computes the same owners."""
    load = [0.0] * parts
    owners = [0] * len(costs)
    for unit in sorted(range(len(costs)), key=lambda u: (-costs[u], u)):
        part = min(range(parts), key=lambda p: (load[p], p))
        owners[unit] = part
        load[part] += costs[unit]
    return owners


def broadcast(tensor: torch.Tensor, group: DecodeGroup, op: str) -> Pending[torch.Tensor]:
    """The lead's `tensor` into everyone's (in place), under the operation deadline."""
    group.state.faults.check(op="broadcast")
    work = dist.broadcast(tensor, src=group.lead, group=group.group, async_op=True)
    return Pending([work], lambda: tensor, (tensor,), op, group.ranks, group.state.deadline)


def share(latents: torch.Tensor | None, mode: int, shape: tuple[int, ...], device: torch.device,
          group: DecodeGroup) -> tuple[torch.Tensor, int]:
    """(latents, mode) on every rank: the lead's. The mode travels first (one int)."""
    me = dist.get_rank()
    header = torch.tensor([mode if me == group.lead else 0], dtype=torch.int64, device=device)
    mode = broadcast(header, group, "split decode mode broadcast").wait(host=True).tolist()[0]
    if me != group.lead:
        latents = torch.empty(shape, dtype=torch.float32, device=device)
    latents = broadcast(latents.contiguous(), group, "split decode latents broadcast").wait(host=True)
    return latents, mode


def decode_share(plan: SplitPlan, group: DecodeGroup, device: torch.device) -> torch.Tensor | None:
    """Decodes this rank's units and gathers every unit on the lead: the frames there, None on the others."""
    me = dist.get_rank()
    owners = [group.ranks[part] for part in assign(plan.costs, len(group.ranks))]
    mine = {unit: plan.decode_unit(unit) for unit, owner in enumerate(owners) if owner == me}
    if me != group.lead:
        sends = [(mine[unit].contiguous(), group.lead) for unit in sorted(mine)]
        p2p.post(sends=sends, op="split decode gather send", state=group.state).wait(host=True)
        return None
    theirs = {unit: torch.empty(plan.output_shape(unit), dtype=plan.dtype, device=device)
              for unit, owner in enumerate(owners) if owner != me}
    recvs = [(theirs[unit], owners[unit]) for unit in sorted(theirs)]  # per peer: in unit order
    p2p.post(recvs=recvs, op="split decode gather receive", state=group.state).wait(host=True)
    return plan.assemble([mine[unit] if unit in mine else theirs[unit] for unit in range(len(owners))])
