"""A two-rank Ulysses step of a checkpoint, timed from the driver: what a sequence-parallel step
really costs on CPU ranks (`pipedit plan --gpu this --model-path`).

On a CPU machine whose cores are shared, a collective waits until every peer process is
scheduled again, so a real step's collectives cost far more than a tight all-to-all loop shows
(measured with the demo model on 2 busy cores: about 5 ms per collective against 1-2 ms in the
loop). The planner turns this measurement into its per-collective latency for CPU ranks.
Cached per model, shape, device kind and dtype beside the one-rank calibration.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from ..adapter import model_inputs
from ..config import EngineConfig
from ..images import placeholder_for
from ..request import VideoRequest

SP_RANKS = 2
WARMUP_STEPS = 3
TIMED_STEPS = 8


def _cache_file() -> Path:
    from ..local_cache import default_cache_dir

    return default_cache_dir() / "calibration-sp.json"


def measure_sp_step(config: EngineConfig, model_path: str, request: VideoRequest) -> float:
    """Median driver-side seconds of one denoising step on SP_RANKS ranks (Ulysses, synchronous
    all-to-all, no decode ranks), after WARMUP_STEPS untimed steps."""
    from .engine import Engine
    from .ray_instance import ensure_ray, stop_ray

    parallel = replace(config.parallel, ulysses=SP_RANKS, ring=1, decode_ranks=0, ranks=None,
                       pipesp_chunk="off", aco="off")
    model = replace(config.model, path=model_path)
    timed = replace(request, steps=WARMUP_STEPS + TIMED_STEPS, cache="none")  # every timed step computes
    timed = placeholder_for(timed, model_inputs(model_path, config.model.name).capabilities.needs_image)
    started_ray = ensure_ray(SP_RANKS)
    try:
        with Engine(replace(config, model=model, parallel=parallel)) as engine:
            ex = engine.executor
            ex.call("begin", timed, ex.call_rank(0, "encode_prompt", timed))
            for _ in range(WARMUP_STEPS):
                ex.call("step", False)
            seconds = []
            for _ in range(TIMED_STEPS):
                start = time.perf_counter()
                ex.call("step", False)
                seconds.append(time.perf_counter() - start)
    finally:
        stop_ray(started_ray)
    return statistics.median(seconds)


def sp_step_seconds(config: EngineConfig, model_path: str, request: VideoRequest) -> float:
    """measure_sp_step, cached per model, shape, device kind and dtype."""
    file = _cache_file()
    cache = json.loads(file.read_text()) if file.is_file() else {}
    key = (f"{Path(model_path).resolve()}|{request.height}x{request.width}x{request.num_frames}|"
           f"{SP_RANKS}|{config.model.device_type()}|{config.model.dtype}")
    if key not in cache:
        cache[key] = measure_sp_step(config, model_path, request)
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(".partial")
        partial.write_text(json.dumps(cache, indent=1))
        partial.replace(file)
    return float(cache[key])
