"""Executors run the same worker code on one rank in-process, or on N ranks as Ray actors.

The engine and scheduler call `call(method, *args)` (every denoise rank, results in rank order)
and `call_rank(rank, method, *args)`; a Ray executor also submits calls without waiting
(decode ranks work while the denoise ranks go on).

`fault_env`: the fault injection switch for the ranks (see `fault_env()`); the engine makes it
once and hands the same one to every rank group it starts, so that they share one `once` folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from .. import faults
from ..config import EngineConfig
from ..distributed.devices import check_distinct_gpus
from ..distributed.interfaces import socket_interface_env
from ..errors import UserInputError
from . import kept_ranks
from .decode_worker import DecodeWorker
from .layout import WorldLayout
from .rank import CPU_THREADS_ENV, cpu_threads_per_rank
from .ray_instance import ensure_ray, stop_ray
from .rank_failure import PlacementAwaitsNode, RankGroupError, leaves_group_intact
from .worker import DenoiseWorker

_log = logging.getLogger(__name__)


class InProcessExecutor:
    def __init__(self, config: EngineConfig, model_path: str, layout: WorldLayout, fault_env: dict[str, str]):
        self.layout = layout
        self.worker = DenoiseWorker(config, layout, environment=fault_env)
        self.worker.setup(model_path)

    def call(self, method: str, *args: Any, timeout: float | None = None) -> list[Any]:
        return [getattr(self.worker, method)(*args)]  # in this thread: nothing to time out

    def call_rank(self, rank: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        return getattr(self.worker, method)(*args)

    def call_all(self, method: str, *args: Any, timeout: float | None = None) -> list[Any]:
        return self.call(method, *args)

    def close(self, keep_ranks: bool = False) -> None:  # in this process: nothing to keep
        self.worker.close()


class RayExecutor:
    """One actor per rank (per GPU, or per CPU slot), packed on one node by a STRICT_PACK
    placement group, or over parallel.nodes nodes by a STRICT_SPREAD group of one bundle per node
    (layout.py: which ranks share a node); torch.distributed over NCCL on GPUs, gloo on CPUs."""

    def __init__(self, config: EngineConfig, model_path: str, layout: WorldLayout, fault_env: dict[str, str]):
        import ray

        self._ray = ray
        self.layout = layout
        self._started_ray = ensure_ray(layout.world_size)
        self._rendezvous = ""  # rank 0's init_method, once the ranks started
        use_gpu = config.model.device_type() == "cuda"
        env = rank_env(fault_env, layout.ranks_per_node)
        self.actors: list = [None] * layout.world_size  # in rank order; None: not started (yet)
        self._calls: dict = {}  # object ref -> (rank, method), to name the rank that failed
        self._failed = False  # a call failed or hung: the group is never kept
        self._kinds = tuple(_worker_class(layout, rank).__name__ for rank in range(layout.world_size))
        # Kept rank processes (kept_ranks): taken by any group but one in a Ray instance of its own (it
        # stops with the group), kept only from a group without injected faults. A taken process
        # reads the fault switch from the rebind, not from the environment it started with.
        self._fault_env = fault_env
        steady_env = {name: value for name, value in env.items() if name not in fault_env}
        self._kept_key = None if self._started_ray else kept_ranks.group_key(layout.nodes, use_gpu, steady_env)
        # Each rank's bundle: its kept_ranks.Placement where the placement group is ours, else None.
        self._placements: list[kept_ranks.Placement | None] = [None] * layout.world_size
        try:
            self._take_kept(config, layout)
            missing = [rank for rank, actor in enumerate(self.actors) if actor is None]
            if missing:
                self._start_actors(config, layout, use_gpu, env, missing)
            self._start(config, model_path)
        except BaseException:
            self.close()  # no actor or GPU reservation outlives a failed start
            raise

    def _take_kept(self, config: EngineConfig, layout: WorldLayout) -> None:
        """Takes kept rank processes (kept_ranks) for as many of this group's ranks as there are,
        each starting anew as its rank; where one does not answer, all taken are ended (and their
        ranks start new processes)."""
        kept = kept_ranks.take(self._kept_key, self._kinds)
        taken = [rank for rank, process in enumerate(kept) if process is not None]
        for rank in taken:
            self.actors[rank], self._placements[rank] = kept[rank].actor, kept[rank].placement
        if not taken:
            return
        try:
            self.get([self.actors[rank].rebind.remote(config, layout, rank, self._fault_env) for rank in taken],
                     config.reliability.rebuild_timeout_s)
        except UserInputError:
            raise  # this group's configuration: new processes would refuse it too
        except Exception as error:  # noqa: BLE001 - a process died while idle, or Ray lost it (submitting fails)
            _log.warning("kept rank processes did not answer (%s); starting new ones", error)
            kept_ranks.end_ranks([self.actors[rank] for rank in taken], [self._placements[rank] for rank in taken])
            for rank in taken:
                self.actors[rank] = self._placements[rank] = None
            self._calls, self._failed = {}, False

    def _start_actors(self, config: EngineConfig, layout: WorldLayout, use_gpu: bool, env: dict,
                      ranks: list[int]) -> None:
        """New rank processes for `ranks` (every rank, or those no kept process took)."""
        ray = self._ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        demand = (len(ranks), len(ranks) if use_gpu else 0)  # (CPUs, GPUs) of their placement
        if self._kept_key is not None:  # processes kept idle may hold the room these need
            kept_ranks.make_room(*demand)
        group, bundle_of, own = _rank_bundles(layout, use_gpu, ranks)
        placement = kept_ranks.Placement(group, demand, len(ranks)) if own else None
        for rank in ranks:
            self._placements[rank] = placement
        for rank in ranks:
            worker = _worker_class(layout, rank)
            # Decode actors take a second call while decoding (prompt encoding for the next request).
            actor_class = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0,
                                     max_concurrency=2 if worker is DecodeWorker else 1)(worker)
            self.actors[rank] = actor_class.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=bundle_of(rank)),
                runtime_env={"env_vars": env},
            ).remote(config, layout, rank)

    def _start(self, config: EngineConfig, model_path: str) -> None:
        limit = config.reliability.rebuild_timeout_s  # a rank that cannot start must not wedge the server
        check_distinct_gpus(self.get([actor.identity.remote() for actor in self.actors], limit))
        # Each rank reads the model from its own node's disk (the demo model is built there).
        self.get([actor.find_model.remote(model_path) for actor in self.actors], limit)
        self.get([actor.check_fault_folder.remote() for actor in self.actors], limit)
        rendezvous = self.get(self.actors[0].rendezvous_address.remote(), limit)
        self._rendezvous = rendezvous
        self.get([actor.setup.remote(model_path, rendezvous) for actor in self.actors], limit)

    def get(self, refs, timeout: float | None = None):
        """The results of `refs` (one ref or a list). Fails as soon as any call fails: a user
        error as itself (exit code 2, HTTP 4xx), anything else as RankGroupError naming the rank
        (died, raised, or, past `timeout` seconds, hung)."""
        try:
            return self._get(refs, timeout)
        except RankGroupError:
            self._failed = True
            raise

    def _get(self, refs, timeout: float | None):
        ray = self._ray
        single = not isinstance(refs, list)
        waiting = [refs] if single else list(refs)
        deadline = None if timeout is None else _now() + timeout
        while waiting:
            left = None if deadline is None else max(0.0, deadline - _now())
            done, waiting = ray.wait(waiting, num_returns=1, timeout=left)
            if not done:
                ranks = sorted({self._calls.get(ref, ("?", ""))[0] for ref in waiting}, key=str)
                methods = sorted({self._calls.get(ref, ("", "?"))[1] for ref in waiting})
                raise RankGroupError(f"rank(s) {ranks} did not finish {'/'.join(methods)} within {timeout:.1f} s "
                                     f"(hung); the rank group is rebuilt", ranks[0] if len(ranks) == 1 else None)
            self._raise_failure(done[0])
        results = ray.get(refs)
        for ref in [refs] if single else refs:
            self._calls.pop(ref, None)
        return results

    def _raise_failure(self, ref) -> None:
        ray = self._ray
        rank, method = self._calls.get(ref, (None, "a call"))
        role = "" if rank is None else (" (decode)" if rank >= self.layout.denoise else " (denoise)")
        try:
            ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, UserInputError):
                raise error.cause from None
            cause = error.cause if error.cause is not None else error
            self._calls.pop(ref, None)
            raise RankGroupError(f"rank {rank}{role} failed in {method}: {type(cause).__name__}: {cause}",
                                 rank, rebuild=not leaves_group_intact(method, cause)) from cause
        except ray.exceptions.RayActorError as error:
            self._calls.pop(ref, None)
            raise RankGroupError(f"rank {rank}{role} died during {method} (its process exited: "
                                 f"{type(error).__name__})", rank) from error

    def _track(self, ref, rank: int, method: str):
        if len(self._calls) > 10_000:  # a safety valve: every call is collected (the scheduler gets
            # the finish calls with their decode), but a ref left behind must not grow this forever
            for stale in list(self._calls)[:5_000]:
                del self._calls[stale]
        self._calls[ref] = (rank, method)
        return ref

    def submit(self, method: str, *args: Any) -> list:
        return [self._track(getattr(actor, method).remote(*args), rank, method)
                for rank, actor in enumerate(self.actors[: self.layout.denoise])]

    def submit_rank(self, rank: int, method: str, *args: Any):
        return self._track(getattr(self.actors[rank], method).remote(*args), rank, method)

    def call(self, method: str, *args: Any, timeout: float | None = None) -> list[Any]:
        return self.get(self.submit(method, *args), timeout)

    def call_rank(self, rank: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        return self.get(self.submit_rank(rank, method, *args), timeout)

    def call_all(self, method: str, *args: Any, timeout: float | None = None) -> list[Any]:
        """`method` on every rank, decode ranks included."""
        return self.get([self.submit_rank(rank, method, *args) for rank in range(len(self.actors))], timeout)

    def ready(self, refs: list, timeout: float = 0.0) -> list:
        done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout)
        return done

    def wait_one(self, refs: list, timeout: float | None = None) -> Any:
        """The first ref of `refs` to finish; None if none has within `timeout` seconds."""
        done, _ = self._ray.wait(refs, num_returns=1, timeout=timeout)
        return done[0] if done else None

    def close(self, keep_ranks: bool = False) -> None:
        """Kills every rank process: also what clears an op stuck on a communicator. `keep_ranks`
        (an engine's own close, its work done): inside kept_ranks.reuse_rank_processes(), a clean
        group's processes are kept instead, for later groups."""
        kept = (keep_ranks and self._kept_key is not None and not self._fault_env and self._clean()
                and self._release())
        if kept:
            kept_ranks.keep([kept_ranks.KeptRank(self._kept_key, kind, actor, placement)
                             for kind, actor, placement in zip(self._kinds, self.actors, self._placements)])
        else:
            kept_ranks.end_ranks(self.actors, self._placements)  # also a bundle whose actor never started
        if self._rendezvous.startswith("file://"):  # rank 0's file store, on this machine
            shutil.rmtree(os.path.dirname(self._rendezvous.removeprefix("file://")), ignore_errors=True)
        stop_ray(self._started_ray)

    def _clean(self) -> bool:
        """No call failed, and every call sent has finished without an error."""
        if self._failed or any(actor is None for actor in self.actors):
            return False
        outstanding = list(self._calls)
        done = self.ready(outstanding) if outstanding else []
        if len(done) < len(outstanding):
            return False
        try:
            self._ray.get(done)
        except Exception:  # noqa: BLE001 - a failure nobody collected: not a group to keep
            return False
        return True

    def _release(self) -> bool:
        """Each rank ends its process group and drops its model; False if one does not answer."""
        try:
            self.get([actor.release.remote() for actor in self.actors], _RELEASE_TIMEOUT_S)
        except (RankGroupError, UserInputError):
            return False
        return True


_RELEASE_TIMEOUT_S = 60.0  # ending a process group and dropping a model: well under a second


def _worker_class(layout: WorldLayout, rank: int) -> type:
    return DecodeWorker if rank >= layout.denoise else DenoiseWorker


def _now() -> float:
    import time

    return time.monotonic()


def fault_env() -> dict[str, str]:
    """The fault injection switch, from this process's environment only, for the ranks: with a new
    `once` folder unless one is given (a folder every node shares, for rank groups over several
    nodes)."""
    spec = os.environ.get(faults.ENV)
    if not spec:
        return {}
    faults.parse(spec)  # a typo fails the start, with the grammar's message
    once_dir = os.environ.get(faults.ONCE_DIR_ENV) or tempfile.mkdtemp(prefix="pipedit-faults-")
    return {faults.ENV: spec, faults.ONCE_DIR_ENV: once_dir}


def rank_env(fault_env: dict[str, str], ranks_on_node: int) -> dict[str, str]:
    """The environment of the rank actors (Ray must be connected): the fault switch, the torch
    threads, the families added from outside (the ranks find the driver's, whatever their node's
    Ray started with), and on a loopback instance NCCL's and gloo's socket interfaces on loopback
    (pipedit.distributed.interfaces: nothing listens beyond loopback)."""
    import ray

    from ..families import ENVIRONMENT

    nodes = [node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")]
    families = {ENVIRONMENT: os.environ[ENVIRONMENT]} if os.environ.get(ENVIRONMENT) else {}
    return {"TOKENIZERS_PARALLELISM": "false", **fault_env, **_thread_env(ranks_on_node), **families,
            **socket_interface_env(nodes)}


def _thread_env(ranks_on_node: int) -> dict[str, str]:
    """PIPEDIT_CPU_THREADS, checked here (a bad value fails the start), for the rank actors."""
    if not os.environ.get(CPU_THREADS_ENV):
        return {}
    return {CPU_THREADS_ENV: str(cpu_threads_per_rank(ranks_on_node))}


def _rank_bundles(layout: WorldLayout, use_gpu: bool, ranks: list[int]):
    """(placement group, rank -> its bundle's index, whether the group is ours) for `ranks` (all
    of the layout's but where kept processes took some: on one node only). Inside a Serve
    replica started with placement_group_bundles (serve/ray_app/deployment.py: the replica's bundle, then
    one per rank; or one per node) the ranks take the replica's bundles, so Serve schedules whole
    rank groups; elsewhere a group of our own.

    A replica's group that lost a node (Ray's state RESCHEDULING: its bundles there wait for a node
    with room) is refused at once: ranks started into it would wait, up to rebuild_timeout_s, with
    the replica's jobs pinned to it. Refused (PlacementAwaitsNode), the rebuild fails, the replica
    hands its jobs to the others and fails Serve's health check, unless it is the only replica
    (runtime/engine_loop.py, serve/jobs/service.py), and a later rebuild works once Ray has placed
    the group again."""
    from ray.util.placement_group import get_current_placement_group, placement_group_table

    current = get_current_placement_group()
    if current is None:
        if layout.nodes > 1:
            return _own_group(layout, use_gpu, ranks), layout.node_of, True
        return _own_group(layout, use_gpu, ranks), ranks.index, True
    state = placement_group_table(current).get("state")
    if state != "CREATED":
        raise PlacementAwaitsNode(f"this replica's placement group is {state}: a node that held its ranks is gone, "
                                  f"and Ray places them again when a node with room joins")
    need = layout.nodes if layout.nodes > 1 else layout.world_size + 1
    if len(current.bundle_specs) < need:
        raise RuntimeError(f"this replica's placement group has {len(current.bundle_specs)} bundles; "
                           f"{layout.world_size} ranks on {layout.nodes} node(s) need {need}")
    return current, (layout.node_of if layout.nodes > 1 else (lambda rank: rank + 1)), False


def _own_group(layout: WorldLayout, use_gpu: bool, ranks: list[int]):
    """One bundle per rank of `ranks` on one node (STRICT_PACK), or one per node holding its ranks on
    `layout.nodes` different nodes (STRICT_SPREAD); refused at once, naming the nodes, when the
    cluster has no room for it (Ray would wait without a word)."""
    import ray
    from ray.util.placement_group import placement_group

    from .cluster import bundle_demand, cluster_nodes, describe_demand, describe_nodes, fits

    if layout.nodes == 1:
        group = placement_group([{"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}] * len(ranks),
                                strategy="STRICT_PACK")
    else:
        per_node = layout.ranks_per_node
        bundle = {"CPU": per_node, "GPU": per_node} if use_gpu else {"CPU": per_node}
        nodes = cluster_nodes()
        if not fits([[bundle_demand(bundle)] * layout.nodes], nodes):
            raise UserInputError(f"{layout.world_size} ranks on {layout.nodes} nodes need {layout.nodes} different "
                                 f"nodes with {describe_demand(bundle_demand(bundle))} each; the Ray cluster has "
                                 f"{describe_nodes(nodes)}. Attach to a cluster of enough nodes (--address) or "
                                 f"use fewer --nodes")
        group = placement_group([bundle] * layout.nodes, strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=120)
    return group


def create_executor(config: EngineConfig, model_path: str, layout: WorldLayout, fault_env: dict[str, str]):
    if layout.world_size == 1:
        return InProcessExecutor(config, model_path, layout, fault_env)
    return RayExecutor(config, model_path, layout, fault_env)
