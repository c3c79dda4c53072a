"""`pipedit env [--json]`: what to know about a machine before running multi-GPU inference.

`gather()` returns the report as a dict; `format_text()` renders it for people, and `--json`
prints the dict as one JSON object. Its keys are stable (bug reports and benchmarks embed it):

  versions       {name: str | null}: "pipedit", "python", "torch", "diffusers", "transformers",
                 "ray", "xformers", "flash-attn" (a version, or "not installed"), "cuda"
                 (torch.version.cuda) and "nccl" (torch.cuda.nccl.version()); those two are null
                 where torch has no CUDA or NCCL
  cpu_count      int: logical CPUs of the machine (os.cpu_count())
  cpu_usable     int: CPUs this process may run on (its affinity mask)
  gpus           list of {"index": int, "name": str, "total_memory_bytes": int,
                 "free_memory_bytes": int | null, "compute_capability": str ("9.0")};
                 empty where there is no CUDA device
  topology       str: the output of `nvidia-smi topo -m`, or why there is none
  peer_access    list of {"from": int, "to": int, "ok": bool} for every ordered GPU pair
                 (torch.cuda.can_device_access_peer); empty with fewer than two GPUs
  attention      {"device": str, "dtype": str, "shape": [int], "kernels": {name: status},
                 "sdpa_backends": {name: {"enabled": bool, "status": str}}}; see
                 pipedit.attention.kernel_probe for the names and statuses
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
from typing import Any

import torch

from ..attention.kernel_probe import probe_attention

# Distribution names, as pip knows them (torch's own version is read from the imported module).
PACKAGES = ("diffusers", "transformers", "ray", "xformers", "flash-attn")
NOT_INSTALLED = "not installed"
NO_GPU = "no CUDA device"
GIB = 1024**3


def package_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def nccl_version() -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):  # torch built without NCCL (every CPU build)
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def versions() -> dict[str, str | None]:
    return {
        "pipedit": package_version("pipedit"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version(),
        **{name: package_version(name) for name in PACKAGES},
    }


def _gpu(index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    # mem_get_info creates a CUDA context on the GPU (a few hundred MB) until this process exits.
    try:
        free: int | None = torch.cuda.mem_get_info(index)[0]
    except RuntimeError:  # e.g. a GPU in exclusive mode held by another process
        free = None
    return {
        "index": index,
        "name": props.name,
        "total_memory_bytes": props.total_memory,
        "free_memory_bytes": free,
        "compute_capability": f"{props.major}.{props.minor}",
    }


def gpus() -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return []
    return [_gpu(index) for index in range(torch.cuda.device_count())]


def peer_access(count: int) -> list[dict[str, Any]]:
    return [
        {"from": a, "to": b, "ok": bool(torch.cuda.can_device_access_peer(a, b))}
        for a in range(count) for b in range(count) if a != b
    ]


def topology() -> str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    try:
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi topo -m failed: {error}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"nvidia-smi topo -m failed: {lines[0] if lines else f'exit code {done.returncode}'}"
    return done.stdout.rstrip()


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def gather() -> dict[str, Any]:
    found_gpus = gpus()
    return {
        "versions": versions(),
        "cpu_count": os.cpu_count() or 1,
        "cpu_usable": _usable_cpus(),
        "gpus": found_gpus,
        "topology": topology(),
        "peer_access": peer_access(len(found_gpus)),
        "attention": probe_attention(),
    }


def format_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False)


# -- text -------------------------------------------------------------------------------------
def _rows(pairs: list[tuple[str, str]]) -> list[str]:
    width = max(len(key) for key, _ in pairs)
    return [f"  {key.ljust(width)}  {value}" for key, value in pairs]


def _versions_text(found: dict[str, str | None]) -> list[str]:
    missing = {"cuda": "none (torch built without CUDA)", "nccl": "none (torch built without NCCL)"}
    return ["Versions"] + _rows([(name, value or missing.get(name, "none")) for name, value in found.items()])


def _gpus_text(found: list[dict[str, Any]]) -> list[str]:
    if not found:
        return [f"GPUs: {NO_GPU}"]
    lines = [f"GPUs: {len(found)}"]
    for gpu in found:
        free = gpu["free_memory_bytes"]
        free_text = "free unknown" if free is None else f"{free / GIB:.1f} GiB free"
        lines.append(f"  [{gpu['index']}] {gpu['name']}: {gpu['total_memory_bytes'] / GIB:.1f} GiB total, "
                     f"{free_text}, compute capability {gpu['compute_capability']}")
    return lines


def _peer_text(pairs: list[dict[str, Any]], count: int) -> list[str]:
    if count < 2:
        return ["Peer access: fewer than two GPUs"]
    ok = {(p["from"], p["to"]): p["ok"] for p in pairs}
    lines = ["Peer access (row GPU can access column GPU)", "     " + "".join(f"{b:>4}" for b in range(count))]
    for a in range(count):
        cells = ("   -" if a == b else ("  ok" if ok[a, b] else "  no") for b in range(count))
        lines.append(f"  {a:>3}" + "".join(cells))
    return lines


def _attention_text(attention: dict[str, Any]) -> list[str]:
    probe = f"{attention['shape']} {attention['dtype']} on {attention['device']}"
    lines = [f"Attention kernels (probe: {probe})"] + _rows(list(attention["kernels"].items()))
    backends = attention["sdpa_backends"]
    lines.append("torch SDPA backends (default dispatch / probe)")
    lines += _rows([(name, f"{'enabled ' if b['enabled'] else 'disabled'}  {b['status']}") for name, b in backends.items()])
    return lines + choice_text(attention["choice"])


def choice_text(choice: dict[str, Any]) -> list[str]:
    """The kernels model.attention auto runs, and why (ms per probe call of each candidate)."""
    lines = [f"Attention chosen ({choice['device']} {choice['dtype']}): {choice['plain']} unmasked, "
             f"{choice['lse']} with log-sum-exp; {choice['why']}"]
    for form, times in choice["measured_ms"].items():
        cells = [(name, f"{ms:.3f} ms" if isinstance(ms, float) else str(ms)) for name, ms in times.items()]
        lines += [f"  {form}"] + ["  " + row for row in _rows(cells)]
    return lines


def format_text(report: dict[str, Any]) -> str:
    lines = _versions_text(report["versions"])
    lines.append(f"CPUs: {report['cpu_count']} ({report['cpu_usable']} usable by this process)")
    lines += _gpus_text(report["gpus"])
    lines += _peer_text(report["peer_access"], len(report["gpus"]))
    lines.append("Topology (nvidia-smi topo -m)")
    lines += ["  " + line for line in report["topology"].splitlines()]
    lines += _attention_text(report["attention"])
    return "\n".join(lines)
