"""Rank processes reused from one rank group to the next, inside `reuse_rank_processes()`.

A rank process costs seconds of CPU to start (torch, diffusers, peft and Ray's worker import
anew in each) and well under one to load a small model. Inside the scope, the processes of a Ray
rank group whose engine closes it cleanly are kept: each rank ends its process group and drops
what it loaded (RankWorker.release). A later group on one node takes kept processes, one of the
right kind for each of its ranks (a process stays the actor class it started as: denoise or decode),
all with the same key (environment, GPU or not, Ray session) and on one node, from whichever
groups kept them; each becomes its rank anew (RankWorker.rebind). On a Ray cluster of one node a
group takes what is kept and starts new processes for the ranks left (in a placement group of
their own: it lands on that one node); on several nodes it takes all its ranks so, or starts them
all anew (Ray places a new group on any node with room, perhaps not the kept ones'). A group with
injected faults takes kept processes too: the rebind hands them its fault switch.

A process stays in the bundle it started in, so a placement group of ours lives as long as any
process started in it (Placement counts them) and is removed with the last. Kept processes hold
their bundles' CPUs and GPUs while idle, so they are bounded: at most KEEP_AT_MOST_RANKS (the
longest unused go first), none while the machine is short of memory (less than
KEEP_WHILE_AVAILABLE of it available when a group is kept or starts: idle processes yield to
other work before Ray's memory monitor kills busy ones, at 95% used), and a new group that finds
no room in the cluster ends kept ones until it does. The scope's end ends them all.

Never kept: a group that saw a failure or has a call still running, one over several nodes, one
inside a Serve replica's placement (the replica owns those bundles), one whose engine injects
faults, and one in a Ray instance the executor started itself (it stops with the group).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

_log = logging.getLogger(__name__)
KEEP_AT_MOST_RANKS = 5  # idle rank processes kept in all (the test suite's groups have 2 to 4 ranks)
# The share of the machine's memory that must be available for idle processes to stay kept
# (about 0.3 GiB each on CPU): two test suites side by side on a 24 GiB machine, each with up to 15
# kept, reached the 95% at which Ray's memory monitor kills workers (a Serve controller among them).
KEEP_WHILE_AVAILABLE = 0.25


class Placement:
    """A placement group of ours and how many of the rank processes started in it still live
    (in a group, or kept): it is removed with the last."""

    def __init__(self, group: Any, demand: tuple[float, float], ranks: int):
        self.group = group
        self.demand = demand  # (CPUs, GPUs) it holds
        self.ranks = ranks
        self._node: str | None = None

    @property
    def node(self) -> str:
        """The id of the node of its first bundle (asked of Ray once): for the groups on one node,
        the only ones kept, where its processes are."""
        if self._node is None:
            from ray.util.placement_group import placement_group_table

            self._node = next(iter(placement_group_table(self.group)["bundles_to_node_id"].values()))
        return self._node


@dataclass(frozen=True, eq=False)  # eq=False: two kept processes are never the same one
class KeptRank:
    key: tuple  # group_key's
    kind: str  # the actor's class name
    actor: Any
    placement: Placement


_lock = threading.Lock()
_open_scopes = 0
_kept: list[KeptRank] = []  # the longest unused first


@contextlib.contextmanager
def reuse_rank_processes() -> Iterator[None]:
    """Rank processes of groups closed cleanly inside are kept for later ones (see the module's text)."""
    global _open_scopes
    with _lock:
        _open_scopes += 1
    try:
        yield
    finally:
        with _lock:
            _open_scopes -= 1
            ended = _take_all() if _open_scopes == 0 else []
        _end_kept(ended)


def group_key(nodes: int, use_gpu: bool, env: dict[str, str]) -> tuple | None:
    """What a kept process must match to be taken (None: this group's may never be kept)."""
    from ray.util.placement_group import get_current_placement_group

    with _lock:
        if _open_scopes == 0:
            return None
    if nodes != 1 or get_current_placement_group() is not None:
        return None
    return use_gpu, tuple(sorted(env.items())), _ray_session()


def _ray_session() -> tuple[str, str]:
    """This driver's Ray session: its node's id (new with every instance) and its job's id (which
    alone repeats: each new instance numbers its jobs from 1 again)."""
    import ray

    context = ray.get_runtime_context()
    return context.get_node_id(), context.get_job_id()


def take(key: tuple | None, kinds: Sequence[str]) -> list[KeptRank | None]:
    """Kept processes for a group of ranks of `kinds` (in rank order), in rank order: for each rank
    one of its kind matching `key`, the latest kept first, all on one node (the one with the most),
    no longer kept; None for a rank left to start anew. All None where the cluster has several
    nodes and the kept ones cannot give every rank (see the module's text). Processes of another
    Ray session (one that ended) are dropped on the way."""
    if key is None:
        return [None] * len(kinds)
    with _lock:
        stale = [kept for kept in _kept if kept.key[-1] != key[-1]]
        for kept in stale:
            _kept.remove(kept)
        chosen = _choose(key, kinds)
        partial = None in chosen and any(kept is not None for kept in chosen)
        if partial and not _one_node():  # asked of Ray only here: most takes are all or nothing
            chosen = [None] * len(kinds)
        for kept in chosen:
            if kept is not None:
                _kept.remove(kept)
        beyond = _beyond_bounds()
    _end_kept(stale)  # their processes ended with their Ray session; this only forgets them
    _end_kept(beyond)
    return chosen


def _choose(key: tuple, kinds: Sequence[str]) -> list[KeptRank | None]:
    on_node: dict[str, list[KeptRank]] = {}
    for kept in reversed(_kept):
        if kept.key == key:
            on_node.setdefault(kept.placement.node, []).append(kept)
    best: list[KeptRank | None] = [None] * len(kinds)
    for candidates in on_node.values():
        chosen: list[KeptRank | None] = []
        for kind in kinds:
            found = next((c for c in candidates if c.kind == kind and all(c is not t for t in chosen)), None)
            chosen.append(found)
        if chosen.count(None) < best.count(None):
            best = chosen
    return best


def _one_node() -> bool:
    """Whether the Ray cluster has one live node (where any new placement group lands beside the
    kept processes)."""
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive")) == 1


def make_room(cpus: float, gpus: float) -> None:
    """Ends kept processes, the longest unused first, until the cluster has `cpus` and `gpus` free
    (Ray's view, which lags a removal by moments: the new placement waits for it). A placement's
    bundles come free with its last process."""
    import ray

    free = ray.available_resources()
    room = [free.get("CPU", 0.0), free.get("GPU", 0.0)]
    actors, groups = [], []
    with _lock:
        while _kept and (room[0] < cpus or room[1] < gpus):
            oldest = _kept.pop(0)
            actors.append(oldest.actor)
            if emptied := _leave([oldest.placement]):
                groups += emptied
                room = [room[0] + oldest.placement.demand[0], room[1] + oldest.placement.demand[1]]
    _end(actors, groups)


def keep(ranks: list[KeptRank]) -> None:
    """Keeps `ranks` (ended at once outside any scope), ending what is beyond the bounds."""
    with _lock:
        if _open_scopes == 0:
            ended = list(ranks)
        else:
            _kept.extend(ranks)
            ended = _beyond_bounds()
    _end_kept(ended)


def _beyond_bounds() -> list[KeptRank]:
    """(Under _lock.) Takes out of the kept the longest unused beyond KEEP_AT_MOST_RANKS, and all of
    them while the machine is short of memory; the caller ends them."""
    bound = 0 if _kept and _available_share() < KEEP_WHILE_AVAILABLE else KEEP_AT_MOST_RANKS
    ended = _kept[:max(0, len(_kept) - bound)]
    del _kept[:len(ended)]
    return ended


def _available_share() -> float:
    """The share of this machine's memory the kernel can hand out now (psutil's `available`:
    free memory and reclaimable cache)."""
    import psutil

    memory = psutil.virtual_memory()
    return memory.available / memory.total


def end_kept() -> None:
    with _lock:
        ended = _take_all()
    _end_kept(ended)


def end_ranks(actors: list, placements: Sequence[Placement | None]) -> None:
    """Kills the rank processes (None: one not started; killing is also what clears an op stuck on
    a communicator); `placements`: one entry per rank, started or not (None: a placement not ours, a
    Serve replica's, or none made yet), and a placement group of ours is removed with its last
    rank. Errors are logged, not raised: processes may be gone already."""
    with _lock:
        groups = _leave([placement for placement in placements if placement is not None])
    _end([actor for actor in actors if actor is not None], groups)


def _take_all() -> list[KeptRank]:
    ended = list(_kept)
    _kept.clear()
    return ended


def _leave(placements: list[Placement]) -> list:
    """(Under _lock.) One rank process of each of `placements` (one entry per process) has ended;
    returns the placement groups left without any."""
    emptied = []
    for placement in placements:
        placement.ranks -= 1
        if placement.ranks == 0:
            emptied.append(placement.group)
    return emptied


def _end_kept(ranks: list[KeptRank]) -> None:
    end_ranks([kept.actor for kept in ranks], [kept.placement for kept in ranks])


def _end(actors: list, groups: list) -> None:
    if not actors and not groups:  # nothing to end: needs no Ray (a scope that kept nothing, a machine without it)
        return
    import ray
    from ray.util.placement_group import remove_placement_group

    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - its Ray session may have ended
            _log.debug("killing a rank actor", exc_info=True)
    for group in groups:
        try:
            remove_placement_group(group)
        except Exception:  # noqa: BLE001
            _log.debug("removing a rank group's placement", exc_info=True)
