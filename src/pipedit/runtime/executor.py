"""Executors run the same worker code on one rank in-process, or on N ranks as Ray actors.

The engine calls `call(method, *args)` (every rank, results in rank order) and
`call_rank(rank, method, *args)`; it never knows which executor it has.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..config import EngineConfig
from ..errors import UserInputError
from .worker import DenoiseWorker


class InProcessExecutor:
    def __init__(self, config: EngineConfig, model_path: str):
        self.world_size = 1
        self.worker = DenoiseWorker(config)
        self.worker.setup(model_path)

    def call(self, method: str, *args: Any) -> list[Any]:
        return [getattr(self.worker, method)(*args)]

    def call_rank(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self.worker, method)(*args)

    def close(self) -> None:
        self.worker.close()


class RayExecutor:
    """N actors, one per GPU (or per CPU slot), packed on one node by a STRICT_PACK placement
    group; torch.distributed over NCCL on GPUs, gloo on CPUs."""

    def __init__(self, config: EngineConfig, model_path: str, world_size: int):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray = ray
        self.world_size = world_size
        self._started_ray = _ensure_ray(world_size)
        use_gpu = config.model.torch_device().type == "cuda"
        bundle = {"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}
        self._group = placement_group([bundle] * world_size, strategy="STRICT_PACK")
        self._remove_group = remove_placement_group
        ray.get(self._group.ready(), timeout=120)
        actor_class = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0)(DenoiseWorker)
        self.actors = [
            actor_class.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=rank),
                runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
            ).remote(config, rank, world_size)
            for rank in range(world_size)
        ]
        rendezvous = self._get(self.actors[0].rendezvous_address.remote())
        self._get([actor.setup.remote(model_path, rendezvous) for actor in self.actors])

    def _get(self, refs):
        try:
            return self._ray.get(refs)
        except self._ray.exceptions.RayTaskError as error:
            # Keep user errors user errors (exit code 2, HTTP 4xx); everything else propagates.
            if isinstance(error.cause, UserInputError):
                raise error.cause from None
            raise

    def call(self, method: str, *args: Any) -> list[Any]:
        return self._get([getattr(actor, method).remote(*args) for actor in self.actors])

    def call_rank(self, rank: int, method: str, *args: Any) -> Any:
        return self._get(getattr(self.actors[rank], method).remote(*args))

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self._remove_group(self._group)
        if self._started_ray:
            self._ray.shutdown()


def _ensure_ray(world_size: int) -> bool:
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


def create_executor(config: EngineConfig, model_path: str):
    world_size = config.parallel.denoise_ranks
    if world_size == 1:
        return InProcessExecutor(config, model_path)
    return RayExecutor(config, model_path, world_size)
