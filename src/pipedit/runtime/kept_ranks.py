"""Rank processes reused from one rank group to the next, inside `reuse_rank_processes()`.

A rank process costs seconds of CPU to start (torch, diffusers, peft and Ray's worker import
anew in each) and well under one to load a small model. Inside the scope, a Ray rank group whose
engine closes it cleanly keeps its processes: each rank ends its process group and drops what it
loaded (RankWorker.release), and a later group with the same key (the same rank kinds in the
same placement, environment and Ray session) takes them, each rank starting anew
(RankWorker.rebind). Kept groups hold their placement's CPUs and GPUs while idle, so they are
bounded: at most KEEP_AT_MOST_RANKS rank processes in all (the longest unused go first), and a
new group that finds no room in the cluster ends kept ones until it does. The scope's end ends
them all.

Never kept: a group that saw a failure or has a call still running, one inside a Serve replica's
placement (the replica owns those bundles), one whose engine injects faults, and one in a Ray
instance the executor started itself (it stops with the group).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

_log = logging.getLogger(__name__)
KEEP_AT_MOST_RANKS = 5  # idle rank processes kept in all (the test suite's groups have 2 to 4 ranks)


@dataclass(frozen=True)
class KeptGroup:
    key: tuple
    group: Any  # the placement group, ours
    bundle_of: Callable[[int], int]
    actors: list
    demand: tuple[float, float]  # (CPUs, GPUs) its placement holds


_lock = threading.Lock()
_open_scopes = 0
_kept: list[KeptGroup] = []  # the longest unused first


@contextlib.contextmanager
def reuse_rank_processes() -> Iterator[None]:
    """Rank groups closed cleanly inside are kept for later ones (see the module's text)."""
    global _open_scopes
    with _lock:
        _open_scopes += 1
    try:
        yield
    finally:
        with _lock:
            _open_scopes -= 1
            ended = _take_all() if _open_scopes == 0 else []
        _end(ended)


def group_key(kinds: tuple[str, ...], nodes: int, use_gpu: bool, env: dict[str, str]) -> tuple | None:
    """What a kept group must match to be taken (None: this group may never be kept). `kinds`: each
    rank's worker class name, in rank order."""
    from ray.util.placement_group import get_current_placement_group

    with _lock:
        if _open_scopes == 0:
            return None
    if get_current_placement_group() is not None:
        return None
    return (kinds, nodes, use_gpu, tuple(sorted(env.items())), _ray_session())


def _ray_session() -> tuple[str, str]:
    """This driver's Ray session: its node's id (new with every instance) and its job's id (which
    alone repeats: each new instance numbers its jobs from 1 again)."""
    import ray

    context = ray.get_runtime_context()
    return context.get_node_id(), context.get_job_id()


def take(key: tuple | None) -> KeptGroup | None:
    """The kept group matching `key` (the latest kept of several), no longer kept; None if none
    matches. Kept groups of another Ray session (one that ended) are dropped on the way."""
    if key is None:
        return None
    with _lock:
        stale = [kept for kept in _kept if kept.key[-1] != key[-1]]
        match = next((kept for kept in reversed(_kept) if kept.key == key), None)
        for dropped in [*stale, match]:
            if dropped is not None:
                _kept.remove(dropped)
    _end(stale)  # their processes ended with their Ray session; this only forgets them
    return match


def make_room(cpus: float, gpus: float) -> None:
    """Ends kept groups, the longest unused first, until the cluster has `cpus` and `gpus` free
    (Ray's view, which lags a removal by moments: the new placement waits for it)."""
    import ray

    free = ray.available_resources()
    room = [free.get("CPU", 0.0), free.get("GPU", 0.0)]
    ended = []
    with _lock:
        while _kept and (room[0] < cpus or room[1] < gpus):
            oldest = _kept.pop(0)
            room = [room[0] + oldest.demand[0], room[1] + oldest.demand[1]]
            ended.append(oldest)
    _end(ended)


def keep(group: KeptGroup) -> None:
    """Keeps `group` (ended at once outside any scope), ending the longest unused ones beyond
    KEEP_AT_MOST_RANKS rank processes."""
    with _lock:
        if _open_scopes == 0:
            ended = [group]
        else:
            _kept.append(group)
            ended = []
            while sum(len(kept.actors) for kept in _kept) > KEEP_AT_MOST_RANKS:
                ended.append(_kept.pop(0))
    _end(ended)


def end_kept() -> None:
    with _lock:
        ended = _take_all()
    _end(ended)


def _take_all() -> list[KeptGroup]:
    ended = list(_kept)
    _kept.clear()
    return ended


def _end(groups: list[KeptGroup]) -> None:
    for kept in groups:
        end_group(kept.actors, kept.group)


def end_group(actors: list, group: Any | None) -> None:
    """Kills the rank processes (also what clears an op stuck on a communicator) and, where given,
    removes the placement group. Errors are logged, not raised: processes may be gone already."""
    import ray
    from ray.util.placement_group import remove_placement_group

    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - its Ray session may have ended
            _log.debug("killing a rank actor", exc_info=True)
    if group is not None:
        try:
            remove_placement_group(group)
        except Exception:  # noqa: BLE001
            _log.debug("removing a rank group's placement", exc_info=True)
