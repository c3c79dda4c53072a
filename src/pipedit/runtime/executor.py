"""Executors run the same worker code on one rank in-process, or on N ranks as Ray actors.

The engine and scheduler call `call(method, *args)` (every denoise rank, results in rank order)
and `call_rank(rank, method, *args)`; a Ray executor also submits calls without waiting
(decode ranks work while the denoise ranks go on).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..config import EngineConfig
from ..distributed.devices import check_distinct_gpus
from ..errors import UserInputError
from .decode_worker import DecodeWorker
from .faults import ENV as FAULT_ENV
from .layout import WorldLayout
from .worker import DenoiseWorker


class InProcessExecutor:
    def __init__(self, config: EngineConfig, model_path: str, layout: WorldLayout):
        self.layout = layout
        self.worker = DenoiseWorker(config, layout)
        self.worker.setup(model_path)

    def call(self, method: str, *args: Any) -> list[Any]:
        return [getattr(self.worker, method)(*args)]

    def call_rank(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self.worker, method)(*args)

    def close(self) -> None:
        self.worker.close()


class RayExecutor:
    """One actor per rank (per GPU, or per CPU slot), packed on one node by a STRICT_PACK
    placement group; torch.distributed over NCCL on GPUs, gloo on CPUs."""

    def __init__(self, config: EngineConfig, model_path: str, layout: WorldLayout):
        import ray

        self._ray = ray
        self.layout = layout
        self._started_ray = ensure_ray(layout.world_size)
        use_gpu = config.model.device_type() == "cuda"
        self._group, self._first_bundle = _rank_bundles(layout.world_size, use_gpu)
        env = {"TOKENIZERS_PARALLELISM": "false"}
        if os.environ.get(FAULT_ENV):
            env[FAULT_ENV] = os.environ[FAULT_ENV]
        self.actors = []
        try:
            self._start(config, model_path, layout, use_gpu, env)
        except BaseException:
            self.close()  # no actor or GPU reservation outlives a failed start
            raise

    def _start(self, config: EngineConfig, model_path: str, layout: WorldLayout, use_gpu: bool, env: dict) -> None:
        ray = self._ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        for rank in range(layout.world_size):
            decode = rank >= layout.denoise
            # Decode actors take a second call while decoding (prompt encoding for the next request).
            actor_class = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0,
                                     max_concurrency=2 if decode else 1)(DecodeWorker if decode else DenoiseWorker)
            self.actors.append(actor_class.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=self._first_bundle + rank),
                runtime_env={"env_vars": env},
            ).remote(config, layout, rank))
        check_distinct_gpus(self.get([actor.identity.remote() for actor in self.actors]))
        rendezvous = self.get(self.actors[0].rendezvous_address.remote())
        self.get([actor.setup.remote(model_path, rendezvous) for actor in self.actors])

    def get(self, refs):
        try:
            return self._ray.get(refs)
        except self._ray.exceptions.RayTaskError as error:
            # Keep user errors user errors (exit code 2, HTTP 4xx); everything else propagates.
            if isinstance(error.cause, UserInputError):
                raise error.cause from None
            raise

    def submit(self, method: str, *args: Any) -> list:
        return [getattr(actor, method).remote(*args) for actor in self.actors[: self.layout.denoise]]

    def submit_rank(self, rank: int, method: str, *args: Any):
        return getattr(self.actors[rank], method).remote(*args)

    def call(self, method: str, *args: Any) -> list[Any]:
        return self.get(self.submit(method, *args))

    def call_rank(self, rank: int, method: str, *args: Any) -> Any:
        return self.get(self.submit_rank(rank, method, *args))

    def ready(self, refs: list, timeout: float = 0.0) -> list:
        done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout)
        return done

    def wait_one(self, refs: list) -> Any:
        done, _ = self._ray.wait(refs, num_returns=1)
        return done[0]

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            self._ray.kill(actor)
        if self._first_bundle == 0:  # a group of our own (not the Serve replica's)
            remove_placement_group(self._group)
        if self._started_ray:
            self._ray.shutdown()


def _rank_bundles(world_size: int, use_gpu: bool):
    """(placement group, index of rank 0's bundle). Inside a Serve replica started with
    placement_group_bundles (bundle 0: the replica, then one per rank, STRICT_PACK) the ranks
    take the replica's bundles, so Serve schedules whole rank groups; elsewhere a STRICT_PACK
    group of our own."""
    import ray
    from ray.util.placement_group import get_current_placement_group, placement_group

    current = get_current_placement_group()
    if current is not None:
        if len(current.bundle_specs) < world_size + 1:
            raise RuntimeError(f"this replica's placement group has {len(current.bundle_specs)} bundles; "
                               f"{world_size} ranks need {world_size + 1} (the replica's, then one per rank)")
        return current, 1
    bundle = {"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}
    group = placement_group([bundle] * world_size, strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=120)
    return group, 0


def ensure_ray(world_size: int) -> bool:
    """Starts a local Ray instance unless one is running (or RAY_ADDRESS names a cluster).
    Returns whether this call started it."""
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init()
        return False
    # A CPU slot per rank even on small machines: ranks share cores, gloo still works.
    ray.init(num_cpus=max(os.cpu_count() or 1, world_size), include_dashboard=False, logging_level=logging.WARNING)
    return True


def create_executor(config: EngineConfig, model_path: str, layout: WorldLayout):
    if layout.world_size == 1:
        return InProcessExecutor(config, model_path, layout)
    return RayExecutor(config, model_path, layout)
