"""What a benchmark report records about the machine: versions, devices and interconnect. No
hostname, and no CUDA context in the driver (device properties only)."""

from __future__ import annotations

import os
import platform
import re

import torch

from ..config import EngineConfig
from ..machine.environment import topology, versions


def interconnect(topology_text: str, gpu_count: int) -> str:
    """"nvlink" when `nvidia-smi topo -m` shows NV# links between GPUs, "pcie" when it shows a
    GPU matrix without them, "single GPU" with one GPU, else "unknown"."""
    if gpu_count == 1:
        return "single GPU"
    if gpu_count < 2 or "GPU0" not in topology_text:
        return "unknown"
    return "nvlink" if re.search(r"\bNV\d+\b", topology_text) else "pcie"


def _gpus() -> list[dict]:
    if not torch.cuda.is_available():
        return []
    found = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        found.append({"index": index, "name": props.name, "total_memory_bytes": props.total_memory})
    return found


def describe_environment(config: EngineConfig) -> dict:
    gpus = _gpus()
    topo = topology() if gpus else "no CUDA device"
    return {
        "versions": versions(),
        "device_type": config.model.device_type(),
        "gpus": gpus,
        "interconnect": interconnect(topo, len(gpus)),
        "topology": topo,
        "collective_backend": "nccl" if config.model.device_type() == "cuda" else "gloo",
        "cpu_count": os.cpu_count() or 1,
        "cpu_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        "platform": platform.platform(),
    }
