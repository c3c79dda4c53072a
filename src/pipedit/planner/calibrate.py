"""The "this" hardware profile: a short measurement of this machine, cached.

Measured once per machine (host name, CPU count, torch version) in about ten seconds, on one
thread as each rank process of a multi-rank CPU run uses (pipedit.runtime.rank gives each rank
cpu_count // ranks threads): float32 GEMM, SDPA attention and 3D convolution throughput, copy
bandwidth, the per-op dispatch overhead, and a two-rank gloo all-to-all's bandwidth and latency.
On a CUDA machine use a named profile (h100, ...) instead: the kernels measured here are CPU ones.
Efficiency factors are 1.0: the rates measured are achieved rates already.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict

from .hardware import GpuProfile, profile

CACHE_NAME = "planner-this-machine.json"


def _cache_file():
    from ..local_cache import default_cache_dir

    return default_cache_dir() / CACHE_NAME


def _key() -> str:
    import torch

    return f"v2|{platform.node()}|{os.cpu_count()}|{torch.__version__}"


def _rate(fn, work: float, repeats: int = 5) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return work / best


def _compute_rates() -> dict:
    import torch
    import torch.nn.functional as F

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        matmul = _rate(lambda: a @ b, 2 * 512 ** 3)
        q = torch.randn(1, 4, 1024, 64)
        attention = _rate(lambda: F.scaled_dot_product_attention(q, q, q), 4 * 1024 * 1024 * 64 * 4)
        x, w = torch.randn(1, 16, 8, 32, 32), torch.randn(16, 16, 3, 3, 3)
        conv = _rate(lambda: F.conv3d(x, w, padding=1), 2 * 27 * 16 * 16 * 8 * 32 * 32)
        big = torch.randn(8 * 1024 * 1024)
        copy = _rate(lambda: big.clone(), 2 * big.numel() * 4)
        tiny = torch.ones(4)
        calls = 2000

        def many_ops():
            for _ in range(calls):
                torch.add(tiny, tiny)

        launch = 1.0 / _rate(many_ops, calls)
    finally:
        torch.set_num_threads(threads)
    return {"matmul": matmul, "attention": attention, "conv": conv, "copy": copy, "launch": launch}


def _alltoall_rank(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist

    results = {}
    for name, numel in (("small", 16), ("large", 4 * 1024 * 1024)):
        send, recv = torch.ones(numel * world), torch.empty(numel * world)
        dist.all_to_all_single(recv, send)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(5):
            dist.all_to_all_single(recv, send)
        results[name] = (time.perf_counter() - start) / 5
    results["bytes"] = 4 * 1024 * 1024 * 4 * (world - 1)
    return results


def _gloo_rates(world: int) -> dict:
    from pipedit.distributed.spawn import run_on_gloo_ranks

    measured = run_on_gloo_ranks(_alltoall_rank, world, timeout_s=120.0)[0]
    latency = measured["small"]
    return {"bandwidth": measured["bytes"] / max(1e-9, measured["large"] - latency), "latency": latency}


def measure() -> GpuProfile:
    rates = _compute_rates()
    gloo = _gloo_rates(2)
    # More ranks than cores: a collective waits for descheduled peers (measured, not modelled).
    crowded = _gloo_rates((os.cpu_count() or 1) + 1)
    return GpuProfile(
        name=f"this machine ({os.cpu_count()} CPU cores, measured)", peak_flops=rates["matmul"],
        mem_bandwidth=rates["copy"], memory=_host_memory(), eff_matmul=1.0,
        eff_attention=rates["attention"] / rates["matmul"], eff_conv=rates["conv"] / rates["matmul"],
        eff_memory=1.0, launch_s=rates["launch"], pcie_bandwidth=gloo["bandwidth"],
        pcie_latency_s=gloo["latency"], host_bandwidth=rates["copy"], host_cores=os.cpu_count() or 1,
        crowded_bandwidth=crowded["bandwidth"], crowded_latency_s=crowded["latency"],
        calibrated=True,
    )


def _host_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


def resolve_profile(name: str) -> GpuProfile:
    """The profile named on the command line: a datasheet one, or "this" machine measured."""
    return this_machine() if name == "this" else profile(name)


def this_machine(remeasure: bool = False) -> GpuProfile:
    """The cached profile of this machine, measured the first time (progress on stderr)."""
    import sys

    file = _cache_file()
    cache = json.loads(file.read_text()) if file.is_file() else {}
    key = _key()
    if remeasure or key not in cache:
        print("pipedit plan: measuring this machine (GEMM, attention, conv3d, copy, gloo all-to-all; "
              "about 10 s, cached) ...", file=sys.stderr, flush=True)
        cache[key] = asdict(measure())
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(".partial")
        partial.write_text(json.dumps(cache, indent=1))
        partial.replace(file)
    return GpuProfile(**cache[key])


def scaled_to_model(profile: GpuProfile, model, shape, steps: int, t_denoise: float, t_decode: float) -> GpuProfile:
    """This machine's profile with compute rates that reproduce a measured one-rank request of
    `model` at `shape` (T_denoise for `steps` steps, T_decode).

    Small models on CPUs run far below the microbenchmarks' rates (per-op overhead dominates), so
    `--gpu this --model-path DIR` scales the DiT's rates (matmul, attention, elementwise, launch)
    by one factor and the VAE's convolution rate by another, from one measurement of that
    checkpoint; communication keeps the measured gloo figures.
    """
    from dataclasses import replace

    from .cost import Layout, decode_seconds, step_seconds
    from .hardware import make_node

    one = make_node(profile, 1, "pcie")
    dit = (t_denoise / steps) / step_seconds(model, shape, one, Layout())
    vae = t_decode / decode_seconds(model, shape, one, tiled=False)
    return replace(profile, eff_matmul=profile.eff_matmul / dit, eff_attention=profile.eff_attention / dit,
                   eff_memory=profile.eff_memory / dit, launch_s=profile.launch_s * dit,
                   eff_conv=profile.eff_conv / vae, name=f"{profile.name.split(' (')[0]} (scaled to the model's one-rank run)")


def with_step_collectives(profile: GpuProfile, model, shape, ranks: int, step_s: float) -> GpuProfile:
    """This machine's profile with the per-collective latency that reproduces a measured
    sequence-parallel step (`ranks`-way Ulysses, synchronous, on `ranks` CPU ranks) of `model`.

    On shared CPU cores a collective inside a real step waits for peers to be scheduled again,
    which a tight all-to-all loop does not show; the latency solved here replaces both gloo
    latencies (with and without more ranks than cores), never below the loops' own figures.
    Apply after scaled_to_model (the compute rates must already match the checkpoint).
    """
    from dataclasses import replace

    from .cost import Layout, step_seconds
    from .hardware import make_node

    def predicted(latency: float) -> float:
        probe = replace(profile, pcie_latency_s=latency, crowded_latency_s=latency)
        return step_seconds(model, shape, make_node(probe, ranks, "pcie"), Layout(ulysses=ranks))

    base, per_second = predicted(0.0), (predicted(1e-3) - predicted(0.0)) / 1e-3
    solved = (step_s - base) / per_second if per_second > 0 else 0.0
    latency = max(solved, profile.pcie_latency_s)
    return replace(profile, pcie_latency_s=latency, crowded_latency_s=max(latency, profile.crowded_latency_s),
                   name=f"{profile.name.rstrip(')')}; collectives from a {ranks}-rank step)")
