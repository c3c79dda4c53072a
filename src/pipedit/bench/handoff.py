"""`pipedit bench handoff`: latent handoff from a denoise rank to a decode rank, through the Ray
object store vs torch.distributed point-to-point (gloo on CPU), for a few latent sizes.
Each figure is the median seconds per transfer; the tensor is made before the clock starts."""

from __future__ import annotations

import statistics
import time

import torch

from ..distributed.spawn import run_on_gloo_ranks

# (name, latent shape [B, C, T, h, w]): the demo's default request and two HunyuanVideo sizes.
SIZES = [
    ("demo 128x128x17", (1, 16, 5, 16, 16)),
    ("hunyuan 544x960x129", (1, 16, 33, 68, 120)),
    ("hunyuan 720x1280x129", (1, 16, 33, 90, 160)),
]


def _p2p_rank(rank: int, world_size: int, shape, repeats: int) -> list[float]:
    import torch.distributed as dist

    from ..distributed.p2p import post

    tensor = torch.randn(shape) if rank == 0 else torch.empty(shape)
    times = []
    for _ in range(repeats + 1):
        dist.barrier()
        start = time.perf_counter()
        # The handoff's own form (batched P2P), as the engine sends latents.
        (post(sends=[(tensor, 1)]) if rank == 0 else post(recvs=[(tensor, 0)])).wait()
        dist.barrier()  # the transfer ends when the receiver has it
        times.append(time.perf_counter() - start)
    return times[1:]


def _object_store_times(shape, repeats: int) -> list[float]:
    import ray

    @ray.remote(num_cpus=0)
    class Holder:
        def make(self, shape):
            self.tensor = torch.randn(shape)
            return True

        def give(self):
            return self.tensor

    @ray.remote(num_cpus=0)
    class Taker:
        def take(self, tensor):
            return tensor.numel()

    holder, taker = Holder.remote(), Taker.remote()
    ray.get(holder.make.remote(shape))
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        ray.get(taker.take.remote(holder.give.remote()))
        times.append(time.perf_counter() - start)
    for actor in (holder, taker):
        ray.kill(actor)
    return times[1:]


def bench_handoff(repeats: int = 5) -> str:
    from ..runtime.ray_instance import ensure_ray, stop_ray

    started = ensure_ray(2)
    lines = [f"latent handoff, median of {repeats} transfers (object store: includes two actor calls)",
             f"{'latents':<22} {'MiB':>7} {'object store ms':>16} {'p2p (gloo) ms':>14}"]
    try:
        for name, shape in SIZES:
            mib = torch.Size(shape).numel() * 4 / 2**20
            store = statistics.median(_object_store_times(shape, repeats))
            p2p = statistics.median(run_on_gloo_ranks(_p2p_rank, 2, shape, repeats, timeout_s=600)[1])
            lines.append(f"{name:<22} {mib:>7.1f} {store * 1e3:>16.2f} {p2p * 1e3:>14.2f}")
    finally:
        stop_ray(started)
    return "\n".join(lines)
