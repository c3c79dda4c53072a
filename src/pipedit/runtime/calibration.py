"""`decode_ranks: auto`: per-request times from a one-rank calibration run, then the balance rule.

The calibration runs in its own short-lived rank process (a Ray actor with one GPU on GPU
machines), never in the driver: the driver must hold no model, and on a GPU node the rank actors
started afterwards need every GPU's memory. The actor is killed when it returns, which frees
everything it loaded. Results are cached per model, shape, steps, device kind and dtype in the
pipedit cache folder, so a node calibrates once per shape.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..config import EngineConfig, ParallelConfig
from ..distributed.devices import gpu_model_name
from ..images import placeholder_for
from ..planner import balance_decode_ranks, split_denoise_ranks
from ..request import VideoRequest
from .layout import WorldLayout
from .worker import DenoiseWorker

CALIBRATION_STEPS = 2


class CalibrationWorker(DenoiseWorker):
    """A world of one rank holding every part of the model, for as long as one measurement."""

    def __init__(self, config: EngineConfig):
        super().__init__(config, WorldLayout())

    def measure(self, model_path: str, request: VideoRequest) -> dict:
        """T_denoise (CALIBRATION_STEPS timed forwards scaled to the step count) and T_decode."""
        self.setup(model_path)
        request = placeholder_for(request, self.adapter.capabilities.needs_image)  # image-to-video
        self.begin(request, self.encode_prompt(request))
        self.step()  # warm-up
        start = time.perf_counter()
        for _ in range(CALIBRATION_STEPS):
            self.time_forward(aco=False)
        t_denoise = (time.perf_counter() - start) / CALIBRATION_STEPS * request.steps
        start = time.perf_counter()
        self.finish()
        return {"t_denoise": t_denoise, "t_decode": time.perf_counter() - start, "pid": os.getpid()}


def measure_request_times(config: EngineConfig, model_path: str, request: VideoRequest) -> dict:
    """One calibration in a fresh rank actor; the actor is killed before this returns."""
    import ray

    from .ray_instance import ensure_ray, stop_ray

    started_ray = ensure_ray(1)
    use_gpu = config.model.device_type() == "cuda"
    actor = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0)(CalibrationWorker).options(
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
    ).remote(config)
    try:
        return ray.get(actor.measure.remote(model_path, request))
    finally:
        ray.kill(actor)
        stop_ray(started_ray)


def _calibration_file() -> Path:
    from ..local_cache import default_cache_dir

    return default_cache_dir() / "calibration.json"


def _key(config: EngineConfig, model_path: str, request: VideoRequest) -> str:
    kind = config.model.device_type()
    device = gpu_model_name() if kind == "cuda" else kind
    shape = f"{request.height}x{request.width}x{request.num_frames}"
    return f"{Path(model_path).resolve()}|{shape}|{request.steps}|{device}|{config.model.dtype}"


def request_times(config: EngineConfig, model_path: str, request: VideoRequest) -> tuple[float, float]:
    """(T_denoise, T_decode) of one request on one rank: cached, else measured in a rank actor."""
    file = _calibration_file()
    cache = json.loads(file.read_text()) if file.is_file() else {}
    key = _key(config, model_path, request)
    if key not in cache:
        measured = measure_request_times(config, model_path, request)
        cache[key] = [measured["t_denoise"], measured["t_decode"]]
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(".partial")
        partial.write_text(json.dumps(cache, indent=1))
        partial.replace(file)
    return tuple(cache[key])


def cached_request_times(config: EngineConfig, model_path: str, request: VideoRequest) -> tuple[float, float] | None:
    file = _calibration_file()
    cache = json.loads(file.read_text()) if file.is_file() else {}
    found = cache.get(_key(config, model_path, request))
    return tuple(found) if found else None


def planned_decode_ranks(config: EngineConfig, model_path: str) -> int | None:
    """The planner's decode-rank count for this node's GPUs (GPUs without a profile: the generic
    one, see planner.auto), None off CUDA. The planner predicts from the checkpoint's configs;
    nothing is loaded."""
    if config.model.device_type() != "cuda":
        return None
    from ..planner.auto import AUTO_PROMPTS, predict_decode_ranks
    from ..planner.models import family_of

    g, parallel = config.generation, config.parallel
    choice = predict_decode_ranks(model_path, family_of(model_path), gpu_model_name(), parallel.ranks,
                                  g.height, g.width, g.num_frames, g.steps, config.model.idle_expert)
    if choice is None:
        return None
    print(f"pipedit: decode_ranks auto: no calibration measurement for this shape; using the planner's "
          f"prediction ({choice.gpu} profile): {choice.decode_ranks} decode rank(s) of {parallel.ranks} "
          f"(predicted {choice.batch_s:.1f} s for {AUTO_PROMPTS} prompts)", file=sys.stderr, flush=True)
    return choice.decode_ranks


def resolve_parallel(config: EngineConfig, model_path: str, heads: int) -> ParallelConfig:
    """`decode_ranks: auto` -> a concrete split of `ranks` into denoise and decode ranks: the
    balance rule on a cached calibration measurement; without one, the planner's prediction on
    CUDA; on CPU ranks a calibration run (then cached)."""
    parallel = config.parallel
    if parallel.decode_ranks != "auto":
        return parallel
    g = config.generation
    request = VideoRequest("calibration: a red fox running through snow", height=g.height, width=g.width,
                           num_frames=g.num_frames, steps=g.steps, seed=g.seed,
                           cache="none")  # full steps: what the planner's rule balances
    measured = cached_request_times(config, model_path, request)
    decode = planned_decode_ranks(config, model_path) if measured is None else None
    if decode is None:
        t_denoise, t_decode = measured or request_times(config, model_path, request)
        decode = balance_decode_ranks(t_denoise, t_decode, parallel.ranks)
    ulysses, ring = split_denoise_ranks(parallel.ranks - decode, heads)
    return replace(parallel, decode_ranks=decode, ulysses=ulysses, ring=ring, ranks=None)
