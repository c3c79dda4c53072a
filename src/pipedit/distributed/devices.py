"""Which device a rank runs on: resolved in one place, always with an index on CUDA.

Hazards this module exists for:
- torch.cuda.set_device and NCCL need an indexed device ("cuda:0"); torch.device("cuda") makes
  set_device raise "Expected a torch.device with a specified index".
- Under Ray a rank actor asking for one GPU sees only that GPU: Ray sets CUDA_VISIBLE_DEVICES to
  the GPU ids it assigned, so the actor's torch index is the position of its Ray GPU id in that
  list (0 for one GPU), not the physical id.
- NCCL refuses two ranks of one communicator on the same GPU; `check_distinct_gpus` says so up
  front, naming the ranks, instead of failing inside the first collective.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..errors import UserInputError


@dataclass(frozen=True)
class DeviceEnvironment:
    """What the process can see; read from the live process by `current`, built by hand in tests."""

    cuda_count: int
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as set, None when unset
    ray_gpu_ids: tuple[str, ...] = ()  # GPUs Ray assigned to this actor (empty outside Ray)
    local_rank: int | None = None  # LOCAL_RANK as a launcher (torchrun) sets it

    @classmethod
    def current(cls) -> "DeviceEnvironment":
        local_rank = os.environ.get("LOCAL_RANK")
        return cls(
            cuda_count=torch.cuda.device_count() if torch.cuda.is_available() else 0,
            visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            ray_gpu_ids=_ray_gpu_ids(),
            local_rank=int(local_rank) if local_rank and local_rank.isdigit() else None,
        )


def _ray_gpu_ids() -> tuple[str, ...]:
    try:
        import ray
    except ImportError:
        return ()
    if not ray.is_initialized():
        return ()
    try:
        return tuple(str(i) for i in ray.get_gpu_ids())
    except Exception:  # noqa: BLE001 - the driver (no worker context) has no assigned GPUs
        return ()


def resolve_rank_device(requested: str, env: DeviceEnvironment | None = None) -> torch.device:
    """The device this process computes on: cpu, or cuda with its index.

    "auto" and "cuda" take the GPU Ray assigned to this actor, else LOCAL_RANK's, else GPU 0;
    "cuda:N" is taken as given (index within what this process sees)."""
    env = DeviceEnvironment.current() if env is None else env
    if requested == "cpu" or (requested == "auto" and env.cuda_count == 0):
        return torch.device("cpu")
    if env.cuda_count == 0:
        raise UserInputError(f"device '{requested}' needs CUDA, but this process sees no GPU "
                             f"(CUDA_VISIBLE_DEVICES={env.visible_devices!r}); use device cpu or auto")
    explicit = torch.device(requested) if requested != "auto" else torch.device("cuda")
    index = explicit.index if explicit.index is not None else _implicit_index(env)
    if not 0 <= index < env.cuda_count:
        raise UserInputError(f"device cuda:{index} does not exist: this process sees {env.cuda_count} GPU(s) "
                             f"(CUDA_VISIBLE_DEVICES={env.visible_devices!r}); indices start at 0")
    return torch.device("cuda", index)


def _implicit_index(env: DeviceEnvironment) -> int:
    if env.ray_gpu_ids:
        if env.visible_devices is None:  # Ray left CUDA_VISIBLE_DEVICES alone: ids are torch indices
            return int(env.ray_gpu_ids[0])
        visible = [part.strip() for part in env.visible_devices.split(",") if part.strip()]
        if env.ray_gpu_ids[0] in visible:
            return visible.index(env.ray_gpu_ids[0])
        raise RuntimeError(f"Ray assigned GPU {env.ray_gpu_ids[0]} but CUDA_VISIBLE_DEVICES is "
                           f"{env.visible_devices!r}; do not override CUDA_VISIBLE_DEVICES inside rank actors")
    if env.local_rank is not None:
        return env.local_rank
    return 0


def gpu_identity(device: torch.device) -> str | None:
    """A name for the physical GPU behind `device` that is the same in every process (its UUID),
    or None on CPU."""
    if device.type != "cuda":
        return None
    properties = torch.cuda.get_device_properties(device)
    uuid = getattr(properties, "uuid", None)
    if uuid is not None:
        return f"{properties.name} {uuid}"
    return f"{properties.name} pci {getattr(properties, 'pci_bus_id', device.index)}"


def check_distinct_gpus(identities: Sequence[tuple[str, str | None]]) -> None:
    """identities: (node, gpu identity or None) per rank. Raises if two ranks share a GPU."""
    owner: dict[tuple[str, str], int] = {}
    for rank, (node, gpu) in enumerate(identities):
        if gpu is None:
            continue
        if (node, gpu) in owner:
            raise UserInputError(
                f"ranks {owner[(node, gpu)]} and {rank} were placed on the same GPU ({gpu} on {node}); NCCL "
                f"refuses two ranks on one GPU: give each rank its own GPU (one Ray GPU per rank actor)"
            )
        owner[(node, gpu)] = rank


def gpu_model_name() -> str:
    """The GPU model of this node, read from the NVIDIA driver's files so that the caller (the
    driver process) creates no CUDA context on a GPU the rank actors need; "cuda" if unknown."""
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        for line in info.read_text().splitlines():
            if line.startswith("Model:"):
                return line.split(":", 1)[1].strip()
    return "cuda"
