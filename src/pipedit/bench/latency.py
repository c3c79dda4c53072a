"""`pipedit bench latency`: the paper's latency protocol over a grid of shapes and methods.

For every (resolution, frames, steps, method) cell, --prompts consecutive prompts go through the
real engine at once (one Engine per method: in-process for one rank, Ray actors with gloo/NCCL
for several), after one warm-up request of the cell's shape that is not counted. Each method
runs on the same total rank count (see pipedit.bench.methods for what each one is).

latency.json (field names are a contract; other tools read them):
  environment  versions (pipedit, torch, diffusers, ...), device_type, gpus [{index, name,
               total_memory_bytes}], interconnect ("nvlink", "pcie", "single GPU" or "unknown"),
               topology (nvidia-smi topo -m, or why not), cpu_count, cpu_usable, platform
  settings     the grid, prompts, ranks, model, device, dtype, base_offload, and how each figure
               is measured (warmup, per_step_s, per_request_s, peak_memory)
  cells        one per (method, width, height, frames, steps):
               method, width, height, frames, steps, prompts, ranks,
               layout {ulysses, ring, decode_ranks, pipesp_chunk (heads per chunk the run used;
                       null: synchronous all-to-all), aco (bool), strategy, text_encoder_on,
                       handoff, offload_idle},
               batch_time_s (first submit -> last video), per_step_s {median, mean},
               per_request_s [submit -> video, completion order], phase_s {encode_mean,
               denoise_mean, decode_mean}, aco_steps, failures [messages],
               peak_memory_bytes {"rank0": int, ...}, peak_memory_kind,
               flops {per_step (the cost model's DiT FLOPs of one step at the batch's mean
               cfg_branches), cfg_branches}, denoise_ranks (the ranks a step is shared by),
               achieved {per_step_median, denoise_mean (a request's denoise_s, steps x
               per_step FLOPs)}: each {flops, seconds, devices, tflops, of_matmul} (tflops =
               flops / seconds / devices / 1e12, per denoise rank) or {..., measurement_error};
               null without a finished request
  matmul       the dense matmul rate measured once per run on the first method's rank 0
               (pipedit.device_time.MatmulRate's fields and its text); the figures' ceiling
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from ..adapter import VideoShape, attention_heads, shape_validator
from ..config import EngineConfig
from .batch import BatchRun, batch_requests, run_batch
from .environment import describe_environment
from .methods import ACO, method_parallel
from .rates import StepRates, model_spec, rank_matmul_rate

WARMUP_STEPS = 2  # the warm-up request's steps (fewer when the cell has fewer)


@dataclass(frozen=True)
class Cell:
    width: int
    height: int
    frames: int
    steps: int

    @property
    def label(self) -> str:
        return f"{self.width}x{self.height}x{self.frames}, {self.steps} steps"


@dataclass(frozen=True)
class LatencySettings:
    resolutions: tuple[tuple[int, int], ...]  # (width, height)
    frames: tuple[int, ...]
    steps: tuple[int, ...]
    prompts: int
    methods: tuple[str, ...]
    ranks: int
    base_offload: bool = False

    def cells(self) -> list[Cell]:
        return [Cell(w, h, f, s) for (w, h), f, s in itertools.product(self.resolutions, self.frames, self.steps)]


def check_cells(model_path: str, settings: LatencySettings, model: str | None = None) -> None:
    """The model's own shape rules, for every cell, before anything loads (InvalidRequestError)."""
    validate = shape_validator(model_path, model)
    for cell in settings.cells():
        validate(VideoShape(height=cell.height, width=cell.width, num_frames=cell.frames), cell.steps)


def bench_latency(config: EngineConfig, settings: LatencySettings, out_dir: Path) -> dict:
    """Runs every cell, writes latency.json/.md/.png into out_dir, returns the report."""
    from ..runtime.engine import resolve_model_path
    from ..runtime.ray_instance import ensure_ray, stop_ray
    from .report import write_reports

    model_path = str(resolve_model_path(config.model.path, config.model.name))
    check_cells(model_path, settings, config.model.name)
    heads = attention_heads(model_path, config.model.name)
    cells = settings.cells()
    configs = {m: _method_config(config, m, settings, heads, cells[0]) for m in settings.methods}  # checks first
    report = {"environment": describe_environment(config), "settings": _settings(config, settings, model_path),
              "cells": []}
    spec, rates = model_spec(model_path, config.model.name), None
    started_ray = ensure_ray(settings.ranks) if settings.ranks > 1 else False
    try:
        with tqdm(total=len(cells) * len(settings.methods), desc="bench latency", unit="cell", file=sys.stderr) as bar:
            for method in settings.methods:
                rows, rates = _run_method(configs[method], method, settings, cells, bar, spec, rates)
                report["cells"] += rows
    finally:
        stop_ray(started_ray)
    report["matmul"] = rates.report()
    write_reports(report, out_dir)
    return report


def _method_config(config: EngineConfig, method: str, settings: LatencySettings, heads: int, first: Cell):
    parallel = method_parallel(method, config.parallel, settings.ranks, heads)
    # The balance rule (decode_ranks auto) calibrates at the generation defaults: the first cell.
    generation = replace(config.generation, height=first.height, width=first.width, num_frames=first.frames,
                         steps=first.steps)
    return replace(config, parallel=parallel, generation=generation)


def _run_method(config: EngineConfig, method: str, settings: LatencySettings, cells: list[Cell], bar, spec,
                rates: StepRates | None) -> tuple[list[dict], StepRates]:
    """The method's cells, and the run's StepRates (the matmul rate measured on this engine's rank 0
    when `rates` is None: the first method's)."""
    from ..runtime.engine import Engine

    bar.set_postfix_str(f"{method}: starting {settings.ranks} rank(s)")
    with Engine(config) as engine:
        rates = rates or StepRates(spec, rank_matmul_rate(engine.executor))
        world, layout = engine.layout.world_size, engine.layout
        offload = method == "base" and settings.base_offload and any(
            engine.executor.call("set_offload_idle", True))
        tqdm.write(f"{method}: {layout.denoise} denoise rank(s) (ulysses {layout.ulysses} x ring {layout.ring}, "
                   f"pipesp_chunk {engine.parallel.pipesp_chunk}), {layout.decode} decode rank(s), "
                   f"aco {'on' if layout.aco and method in ACO else 'off'}"
                   + (f", offload {'on' if offload else 'requested, a no-op here'}" if settings.base_offload and
                      method == "base" else ""), file=sys.stderr)
        rows = []
        for cell in cells:
            bar.set_postfix_str(f"{method} {cell.label}")
            rows.append(_run_cell(engine, method, cell, settings.prompts, offload, world, rates))
            bar.update(1)
    return rows, rates


def _run_cell(engine, method: str, cell: Cell, prompts: int, offload: bool, world: int, rates: StepRates) -> dict:
    ex = engine.executor
    warmup = run_batch(engine, batch_requests(cell.height, cell.width, cell.frames, min(cell.steps, WARMUP_STEPS), 1,
                                                engine.needs_image))
    if warmup.failures:
        raise RuntimeError(f"{method} {cell.label}: the warm-up request failed: {warmup.failures[0].message}")
    for rank in range(world):
        ex.call_rank(rank, "reset_peak_memory")

    def show(done: int, seconds: float, result) -> None:
        t = result.timings
        tqdm.write(f"  {method} {cell.label}: request {done}/{prompts} done at {seconds:.2f} s "
                   f"(denoise {t['denoise_s']:.2f} s, decode {t['decode_s']:.2f} s)", file=sys.stderr)

    run = run_batch(engine, batch_requests(cell.height, cell.width, cell.frames, cell.steps, prompts,
                                         engine.needs_image), show)
    peaks = [ex.call_rank(rank, "peak_memory") for rank in range(world)]
    figures = _cell_figures(engine, method, cell, prompts, run, peaks, offload, ex.call_rank(0, "pipesp_chunk"))
    return figures | _cell_rates(rates, cell, run, figures, engine.layout.denoise)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _cell_figures(engine, method: str, cell: Cell, prompts: int, run: BatchRun, peaks, offload: bool, chunk) -> dict:
    from ..runtime.sequence_parallel import strategy_name

    layout, parallel = engine.layout, engine.parallel
    aco = layout.aco and method in ACO
    strategy = "none" if layout.denoise == 1 and not aco else ("aco" if aco else strategy_name(parallel))
    return {
        "method": method, "width": cell.width, "height": cell.height, "frames": cell.frames, "steps": cell.steps,
        "prompts": prompts, "ranks": layout.world_size,
        "layout": {"ulysses": layout.ulysses, "ring": layout.ring, "decode_ranks": layout.decode,
                   "pipesp_chunk": chunk, "aco": aco, "strategy": strategy,
                   "text_encoder_on": layout.text_on, "handoff": layout.handoff if layout.decode else None,
                   "offload_idle": offload},
        "batch_time_s": run.total_s,
        "per_step_s": {"median": statistics.median(run.step_s) if run.step_s else None, "mean": _mean(run.step_s)},
        "per_request_s": run.latencies_s,
        "phase_s": {name: _mean([r.timings[f"{name}_s"] for r in run.results]) for name in ("encode", "denoise", "decode")},
        "aco_steps": run.aco_steps,
        "failures": [failure.message for failure in run.failures],
        "peak_memory_bytes": {f"rank{rank}": value for rank, (value, _) in enumerate(peaks)},
        "peak_memory_kind": peaks[0][1],
    }


def _cell_rates(rates: StepRates, cell: Cell, run: BatchRun, figures: dict, devices: int) -> dict:
    """The cell's step FLOPs (the cost model's, at the guidance branches its requests ran) and the
    rates of its per-step median and mean denoise time."""
    if not run.results:
        return {"flops": None, "denoise_ranks": devices, "achieved": None}
    branches = statistics.fmean(r.timings["cfg_branches"] for r in run.results)
    step = rates.step_flops(cell.height, cell.width, cell.frames, branches)
    return {"flops": {"per_step": step, "cfg_branches": branches}, "denoise_ranks": devices,
            "achieved": {"per_step_median": rates.figures(step, figures["per_step_s"]["median"], devices),
                         "denoise_mean": rates.figures(step * cell.steps, figures["phase_s"]["denoise"], devices)}}


def _settings(config: EngineConfig, settings: LatencySettings, model_path: str) -> dict:
    cuda = config.model.device_type() == "cuda"
    return {
        "resolutions": [f"{w}x{h}" for w, h in settings.resolutions], "frames": list(settings.frames),
        "steps": list(settings.steps), "prompts": settings.prompts, "methods": list(settings.methods),
        "ranks": settings.ranks, "model": Path(model_path).name, "device": config.model.device_type(),
        "dtype": config.model.dtype, "base_offload": settings.base_offload,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "warmup": f"1 request per cell (its shape, min(steps, {WARMUP_STEPS}) steps) before the batch, not counted; "
                  "each method's engine starts (ranks, model loading) before its cells, not counted",
        "per_step_s": "driver-side time between consecutive step-done events of a request, over every step of the batch",
        "per_request_s": "submit -> video of each request; the batch's prompts are all submitted at its start",
        "peak_memory": ("torch.cuda.max_memory_allocated per rank" if cuda else
                        "peak resident memory (VmHWM) of each rank's process, reset before the batch; "
                        "in-process runs (1 rank) count the driver too"),
    }
