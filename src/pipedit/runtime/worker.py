"""A denoise worker: one rank of the sequence-parallel group.

The same class runs in-process (a world of one rank) and inside Ray actors (one per GPU). The
engine drives it with plain dataclasses: encode_prompt (rank 0), begin, step, finish.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch

from ..adapter import load_adapter
from ..config import EngineConfig
from ..logs import quiet_libraries
from ..request import VideoRequest, VideoResult
from .denoise import DenoiseJob
from .sequence_parallel import SequenceParallelRuntime

RENDEZVOUS_TIMEOUT = timedelta(minutes=10)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class DenoiseWorker:
    def __init__(self, config: EngineConfig, rank: int = 0, world_size: int = 1):
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.adapter = None
        self.sp: SequenceParallelRuntime | None = None
        self.job: DenoiseJob | None = None

    def rendezvous_address(self) -> str:
        """host:port for torch.distributed, chosen on rank 0's node."""
        import ray.util

        return f"{ray.util.get_node_ip_address()}:{_free_port()}"

    def setup(self, model_path: str, rendezvous: str | None = None) -> None:
        quiet_libraries()
        device = self.config.model.torch_device()
        if self.world_size > 1:
            self._init_process_group(device, rendezvous)
        parts = {"dit"} | ({"text", "vae"} if self.rank == 0 else set())
        self.adapter = load_adapter(model_path, parts=parts, device=device, dtype=self.config.model.torch_dtype())
        if self.world_size > 1:
            self.sp = SequenceParallelRuntime.install(self.adapter, self.config.parallel, device)

    def _init_process_group(self, device: torch.device, rendezvous: str | None) -> None:
        import torch.distributed as dist

        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.world_size))
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            init_method=f"tcp://{rendezvous}", rank=self.rank, world_size=self.world_size,
            timeout=RENDEZVOUS_TIMEOUT,
        )

    def num_heads(self) -> int:
        return self.adapter.num_heads

    # -- one request ----------------------------------------------------------------------
    def encode_prompt(self, request: VideoRequest) -> dict[str, torch.Tensor]:
        self.adapter.validate(request.shape, request.steps)
        return {k: v.cpu() for k, v in self.adapter.encode_prompt(request.prompt).items()}

    def begin(self, request: VideoRequest, cond: dict[str, torch.Tensor]) -> int:
        self.adapter.validate(request.shape, request.steps)
        device = self.adapter.device
        cond = {k: v.to(device) for k, v in cond.items()}
        if self.sp is not None:
            self.sp.prepare(self.adapter, request)
        self.job = DenoiseJob.start(self.adapter, request, cond)
        return self.job.total_steps

    def step(self) -> int:
        self.job.step(self.adapter)
        return self.job.steps_done

    def finish(self) -> VideoResult | None:
        """Rank 0 decodes and returns the result; other ranks return None."""
        job, self.job = self.job, None
        if self.rank != 0:
            return None
        frames = self.adapter.decode(job.latents)[0].cpu()
        return VideoResult(job.request.request_id, frames=frames, latents=job.latents.float().cpu())

    def time_steps(self, request: VideoRequest, cond: dict, chunks: list, repeats: int) -> dict:
        from .step_timer import time_steps

        return time_steps(self, request, cond, chunks, repeats)

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
