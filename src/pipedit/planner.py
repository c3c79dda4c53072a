"""Automatic choices the paper leaves to hand-tuning: here, the decode-group size.

DeDiVAE balance rule (PipeDiT §2): with single-rank per-request times T_denoise and T_decode,
N_decode ~= T_decode / (T_decode + T_denoise) * N. The times come from a short calibration run
on one rank (one request of the configured shape: two timed denoising steps scaled to the step
count, and one decode), cached per model, shape, steps and device in the pipedit cache folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from .config import EngineConfig, ParallelConfig
from .request import VideoRequest

CALIBRATION_STEPS = 2


def balance_decode_ranks(t_denoise: float, t_decode: float, ranks: int) -> int:
    """The balance rule, rounded, keeping at least one rank in each group."""
    share = t_decode / (t_decode + t_denoise)
    return min(ranks - 1, max(1, round(share * ranks)))


def split_denoise_ranks(ranks: int, heads: int) -> tuple[int, int]:
    """(ulysses, ring) for `ranks` denoise ranks: as much Ulysses as the heads allow."""
    ulysses = max(u for u in range(1, min(ranks, heads) + 1) if ranks % u == 0)
    return ulysses, ranks // ulysses


def _calibration_file() -> Path:
    from pipedit.integrations.hunyuan_video.demo_checkpoint import default_cache_dir

    return default_cache_dir() / "calibration.json"


def _key(config: EngineConfig, model_path: str, request: VideoRequest) -> str:
    device = config.model.torch_device()
    if device.type == "cuda":
        import torch

        device = torch.cuda.get_device_name(device)
    return f"{Path(model_path).resolve()}|{request.height}x{request.width}x{request.num_frames}|{request.steps}|{device}"


def measure_request_times(config: EngineConfig, model_path: str, request: VideoRequest) -> tuple[float, float]:
    """(T_denoise, T_decode) of one request on one rank, in this process."""
    from .runtime.layout import WorldLayout
    from .runtime.worker import DenoiseWorker

    worker = DenoiseWorker(config, WorldLayout())
    worker.setup(model_path)
    cond = worker.encode_prompt(request)
    worker.begin(request, cond)
    worker.step()  # warm-up
    start = time.perf_counter()
    for _ in range(CALIBRATION_STEPS):
        worker.time_forward(aco=False)
    t_denoise = (time.perf_counter() - start) / CALIBRATION_STEPS * request.steps
    start = time.perf_counter()
    worker.finish()
    return t_denoise, time.perf_counter() - start


def request_times(config: EngineConfig, model_path: str, request: VideoRequest) -> tuple[float, float]:
    """Cached calibration: measured once per model, shape, step count and device."""
    file = _calibration_file()
    cache = json.loads(file.read_text()) if file.is_file() else {}
    key = _key(config, model_path, request)
    if key not in cache:
        cache[key] = list(measure_request_times(config, model_path, request))
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(".partial")
        partial.write_text(json.dumps(cache, indent=1))
        partial.replace(file)
    return tuple(cache[key])


def resolve_parallel(config: EngineConfig, model_path: str, heads: int) -> ParallelConfig:
    """`decode_ranks: auto` -> a concrete split of `ranks` into denoise and decode ranks."""
    parallel = config.parallel
    if parallel.decode_ranks != "auto":
        return parallel
    g = config.generation
    request = VideoRequest("calibration: a red fox running through snow", height=g.height, width=g.width,
                           num_frames=g.num_frames, steps=g.steps, seed=g.seed)
    t_denoise, t_decode = request_times(config, model_path, request)
    decode = balance_decode_ranks(t_denoise, t_decode, parallel.ranks)
    ulysses, ring = split_denoise_ranks(parallel.ranks - decode, heads)
    return replace(parallel, decode_ranks=decode, ulysses=ulysses, ring=ring, ranks=None)
