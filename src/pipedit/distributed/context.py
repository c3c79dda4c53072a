"""ParallelContext: the process groups of one sequence-parallel (SP) world, passed explicitly.

Layout (fixed, relied on by the attention strategies): sp rank = ring_rank * ulysses_degree +
ulysses_rank. A Ulysses group is a run of consecutive sp ranks, so its members' sequence shards
are contiguous in the global sequence; a ring group holds the sp ranks with the same
ulysses_rank, i.e. the same head shard.

CFG parallel adds an outer dimension: `cfg_degree` SP worlds side by side, one per guidance
branch, each over consecutive global ranks (branch g holds ranks[g*sp : (g+1)*sp]). The cfg
group links the ranks with the same sp rank across branches (they exchange noise predictions).

`state` is the rank's RankState (fault points, operation deadline), which the strategies hand to
the collectives they post.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .rank_state import RankState

ProcessGroup = dist.ProcessGroup


@dataclass(frozen=True)
class ParallelContext:
    """Where this rank sits in the SP world. Groups of size 1 are None (no communication)."""

    rank: int
    world_size: int
    ulysses_degree: int
    ring_degree: int
    sp_group: ProcessGroup | None
    ulysses_group: ProcessGroup | None
    ring_group: ProcessGroup | None
    ring_global_ranks: tuple[int, ...]
    device: torch.device
    cfg_rank: int = 0  # which guidance branch this SP world computes
    cfg_degree: int = 1  # SP worlds side by side (2 with CFG parallel)
    cfg_group: ProcessGroup | None = None  # this sp rank's peers in the other branches
    state: RankState = field(default_factory=RankState, compare=False)  # default: no faults, no deadline

    def __post_init__(self) -> None:
        _check_degrees(self.ulysses_degree, self.ring_degree, self.world_size)
        if self.cfg_degree < 1 or not 0 <= self.cfg_rank < self.cfg_degree:
            raise ValueError(f"cfg_rank {self.cfg_rank} outside cfg_degree {self.cfg_degree}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside SP world of size {self.world_size}")
        if len(self.ring_global_ranks) != self.ring_degree:
            raise ValueError(
                f"ring_global_ranks {self.ring_global_ranks} must have ring_degree="
                f"{self.ring_degree} entries"
            )

    @property
    def ulysses_rank(self) -> int:
        return self.rank % self.ulysses_degree

    @property
    def ring_rank(self) -> int:
        return self.rank // self.ulysses_degree

    @classmethod
    def single(cls, device: str | torch.device = "cpu") -> ParallelContext:
        """A world of one rank: every strategy degenerates to local attention."""
        own = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        return cls(0, 1, 1, 1, None, None, None, (own,), torch.device(device))

    @classmethod
    def create(
        cls,
        ulysses_degree: int,
        ring_degree: int,
        ranks: Sequence[int] | None = None,
        device: str | torch.device | None = None,
        cfg_degree: int = 1,
        state: RankState | None = None,
    ) -> ParallelContext | None:
        """Build the SP groups over `ranks` (global ranks, default: the whole default group),
        split into `cfg_degree` SP worlds of ulysses_degree * ring_degree ranks each.

        Collective: every rank of the default group must call this with the same arguments,
        since dist.new_group must be entered by all ranks in the same order. Ranks outside
        `ranks` (e.g. VAE decode ranks) take part in group creation and get None back.
        """
        if not dist.is_initialized():
            raise RuntimeError("call dist.init_process_group before ParallelContext.create")
        all_ranks = tuple(range(dist.get_world_size()) if ranks is None else ranks)
        _check_ranks(all_ranks, dist.get_world_size())
        if cfg_degree < 1 or len(all_ranks) % cfg_degree:
            raise ValueError(f"{len(all_ranks)} ranks do not split into cfg_degree {cfg_degree} equal SP worlds")
        size = len(all_ranks) // cfg_degree
        _check_degrees(ulysses_degree, ring_degree, size)
        groups = _GroupBuilder()
        me = dist.get_rank()
        mine = None
        for branch in range(cfg_degree):
            sp_ranks = all_ranks[branch * size : (branch + 1) * size]
            built = _build_groups(groups, sp_ranks, ulysses_degree, ring_degree)
            if me in sp_ranks:
                mine = (branch, sp_ranks, built)
        cfg_group = None
        for sp_rank in range(size):  # the same sp rank in every branch
            members = all_ranks[sp_rank::size]
            group = groups.get(members)
            if me in members:
                cfg_group = group
        if mine is None:
            return None
        branch, sp_ranks, (sp_group, ulysses_group, ring_group, ring_ranks) = mine
        return cls(
            rank=sp_ranks.index(me),
            world_size=size,
            ulysses_degree=ulysses_degree,
            ring_degree=ring_degree,
            sp_group=sp_group,
            ulysses_group=ulysses_group,
            ring_group=ring_group,
            ring_global_ranks=ring_ranks,
            device=_default_device() if device is None else torch.device(device),
            cfg_rank=branch,
            cfg_degree=cfg_degree,
            cfg_group=cfg_group,
            state=RankState() if state is None else state,
        )


def _build_groups(
    groups: _GroupBuilder, sp_ranks: tuple[int, ...], ulysses_degree: int, ring_degree: int
) -> tuple[ProcessGroup | None, ProcessGroup | None, ProcessGroup | None, tuple[int, ...]]:
    """Create every group on every rank (same order); return this rank's (sp, ulysses, ring,
    ring members in ring order)."""
    sp_group = groups.get(sp_ranks)
    me = dist.get_rank()
    mine_u = mine_r = None
    ring_ranks: tuple[int, ...] = ()
    for ring_rank in range(ring_degree):  # ulysses groups: consecutive sp ranks
        members = sp_ranks[ring_rank * ulysses_degree : (ring_rank + 1) * ulysses_degree]
        group = groups.get(members)
        if me in members:
            mine_u = group
    for ulysses_rank in range(ulysses_degree):  # ring groups: same head shard
        members = sp_ranks[ulysses_rank::ulysses_degree]
        group = groups.get(members)
        if me in members:
            mine_r, ring_ranks = group, members
    return sp_group, mine_u, mine_r, ring_ranks


class _GroupBuilder:
    """Creates each distinct rank set once; size-1 sets need no group (None)."""

    def __init__(self) -> None:
        self._made: dict[tuple[int, ...], ProcessGroup] = {}

    def get(self, members: tuple[int, ...]) -> ProcessGroup | None:
        if len(members) == 1:
            return None
        if members not in self._made:
            self._made[members] = dist.new_group(list(members))
        return self._made[members]


def _check_degrees(ulysses_degree: int, ring_degree: int, world_size: int) -> None:
    if ulysses_degree < 1 or ring_degree < 1:
        raise ValueError(
            f"ulysses_degree and ring_degree must be >= 1 (got {ulysses_degree}, {ring_degree})"
        )
    if ulysses_degree * ring_degree != world_size:
        valid = [(u, world_size // u) for u in range(1, world_size + 1) if world_size % u == 0]
        raise ValueError(
            f"ulysses_degree * ring_degree must equal the number of sequence-parallel ranks "
            f"({world_size}), got {ulysses_degree} * {ring_degree}; valid (ulysses, ring) "
            f"pairs: {valid}"
        )


def _check_ranks(ranks: tuple[int, ...], world_size: int) -> None:
    if not ranks or len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks must be a non-empty list of distinct global ranks, got {ranks}")
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise ValueError(f"ranks {bad} are outside the default group (world size {world_size})")


def _default_device() -> torch.device:
    if dist.get_backend() == "nccl" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
