"""`pipedit bench cache`: step caching per model family and cache setting, on one device.

For each family, after one warm-up, the uncached request and the same request (same seed) with
each cache setting run in interleaved rounds (medians reported): transformer evaluations
computed/skipped, denoising and whole-request seconds and their ratios to the uncached run, the
final latents' relative difference (L2 norm of the difference over the uncached latents' norm)
and the PSNR of the decoded frames against the uncached ones. Written as cache.json and cache.md.

Each row's `flops` counts the DiT work of its computed steps only (the cost model's step at the
request's guidance branches, times `computed`): the head a skipped step still runs (FBCache's first
block, TeaCache's modulated input) is left out, so `achieved` (those FLOPs over denoise_s, with
the matmul rate measured once per run on the first family's rank) is a lower bound of the rate the
device ran at, never an uncached-equivalent figure.

Random-weight demo models say nothing about visual quality: their per-step changes are large
(First-Block distances 0.3-0.6, where the papers' thresholds for released models are 0.05-0.2), so the thresholds that skip here
are not the ones to use on a released checkpoint, and the differences only show that the cache
changes what it should and by how much on these weights.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..cache.spec import parse_cache
from ..config import EngineConfig
from ..errors import UserInputError
from ..request import VideoRequest
from .rates import StepRates, markdown_cells, matmul_report, model_spec, rank_matmul_rate

CAVEAT = ("Random-weight demo models say nothing about visual quality: these figures show how many transformer "
          "evaluations each setting skips and how far the result moves on these weights, not how a video looks.")
FLOPS_COUNTED = ("the cost model's DiT FLOPs of the computed steps only (a skipped step's head is not counted): "
                 "TFLOP/s over denoise s is a lower bound")
DEFAULT_CACHES = ("fbcache:0.35", "fbcache:0.45", "fbcache:0.55", "teacache:0.1", "teacache:0.2")


@dataclass(frozen=True)
class CacheBenchSettings:
    families: tuple[str, ...]
    caches: tuple[str, ...]
    height: int
    width: int
    num_frames: int
    steps: int
    repeats: int


def _psnr(frames: torch.Tensor, reference: torch.Tensor) -> float:
    mse = torch.mean((frames.float() - reference.float()) ** 2).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def _relative(latents: torch.Tensor, reference: torch.Tensor) -> float:
    return (torch.linalg.vector_norm(latents - reference) / torch.linalg.vector_norm(reference)).item()


def _interleaved(engine, requests: dict[str, VideoRequest], repeats: int) -> dict[str, tuple]:
    """Each setting once per round, rounds repeated (a busy machine slows every setting alike):
    setting -> (result, median request seconds, median denoise seconds) or the refusal."""
    runs: dict[str, list] = {cache: [] for cache in requests}
    refused: dict[str, str] = {}
    for _ in range(repeats):
        for cache, request in requests.items():
            if cache in refused:
                continue
            start = time.perf_counter()
            try:
                result = engine.generate(request)
            except UserInputError as error:  # e.g. teacache for a family without coefficients
                refused[cache] = str(error)
                continue
            runs[cache].append((result, time.perf_counter() - start))
    return {cache: refused[cache] if cache in refused else
            (runs[cache][-1][0], statistics.median(s for _, s in runs[cache]),
             statistics.median(r.timings["denoise_s"] for r, _ in runs[cache])) for cache in requests}


def _family_rows(config: EngineConfig, family: str, settings: CacheBenchSettings,
                 matmul=None) -> tuple[list[dict], object]:
    """The family's rows, and the run's matmul rate (measured on this engine's rank 0 when `matmul`
    is None: the first family's)."""
    from ..runtime.engine import Engine, resolve_model_path

    config = replace(config, model=replace(config.model, name=family, path=config.model.path))
    request = VideoRequest("a red fox running through fresh snow", height=settings.height, width=settings.width,
                           num_frames=settings.num_frames, steps=settings.steps, seed=0, cache="none")
    requests = {cache: replace(request, cache=cache) for cache in ("none", *settings.caches)}
    with Engine(config) as engine:
        matmul = matmul or rank_matmul_rate(engine.executor)
        devices = engine.layout.denoise
        engine.generate(replace(request, steps=1))  # warm-up
        measured = _interleaved(engine, requests, settings.repeats)
    rates = StepRates(model_spec(resolve_model_path(config.model.path, family), family), matmul)
    reference, base_s, base_denoise_s = measured["none"]
    rows = []
    for cache, outcome in measured.items():
        if isinstance(outcome, str):
            rows.append({"family": family, "cache": cache, "refused": outcome})
            continue
        result, seconds, denoise_s = outcome
        computed = int(result.timings.get("cache_computed", settings.steps))
        branches = result.timings["cfg_branches"]
        flops = computed * rates.step_flops(settings.height, settings.width, settings.num_frames, branches)
        rows.append({
            "family": family, "cache": cache, "computed": int(result.timings.get("cache_computed", settings.steps)),
            "skipped": int(result.timings.get("cache_skipped", 0)), "latency_s": seconds, "denoise_s": denoise_s,
            "denoise_ratio": denoise_s / base_denoise_s, "latency_ratio": seconds / base_s,
            "latents_rel_l2": _relative(result.latents, reference.latents),
            "frames_psnr_db": _psnr(result.frames, reference.frames),
            "cfg_branches": branches, "flops": flops, "achieved": rates.figures(flops, denoise_s, devices)})
    return rows, matmul


def bench_cache(config: EngineConfig, settings: CacheBenchSettings, out_dir: Path) -> dict:
    for cache in settings.caches:
        parse_cache(cache)  # a typo fails before any model loads
    rows, matmul = [], None
    for family in settings.families:
        family_rows, matmul = _family_rows(config, family, settings, matmul)
        rows += family_rows
    report = {"settings": settings.__dict__ | {"families": list(settings.families), "caches": list(settings.caches)},
              "device": config.model.device_type(), "caveat": CAVEAT, "rows": rows,
              "matmul": matmul_report(matmul), "flops_counted": FLOPS_COUNTED}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cache.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "cache.md").write_text(markdown(report))
    return report


def _figure(value, form: str) -> str:
    if value is None:
        return "-"
    return "inf" if isinstance(value, float) and math.isinf(value) else format(value, form)


def markdown(report: dict) -> str:
    s = report["settings"]
    lines = [(f"# bench cache: {s['width']}x{s['height']}x{s['num_frames']}, {s['steps']} steps, "
              f"{report['device']}, median of {s['repeats']}"), "", report["caveat"], "",
             f"TFLOP/s: {report['flops_counted']}; {report['matmul']['text']}.", "",
             ("| family | cache | computed | skipped | denoise s | vs uncached | request s | vs uncached "
              "| latents rel. L2 | frames PSNR dB | TFLOP/s | of matmul |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in report["rows"]:
        if "refused" in row:
            lines.append(f"| {row['family']} | {row['cache']} | refused: {row['refused']} ||||||||||")
            continue
        lines.append(f"| {row['family']} | {row['cache']} | {row['computed']} | {row['skipped']} | "
                     f"{row['denoise_s']:.2f} | {row['denoise_ratio']:.2f}x | {row['latency_s']:.2f} | {row['latency_ratio']:.2f}x | "
                     f"{_figure(row['latents_rel_l2'], '.4f')} | "
                     f"{_figure(row['frames_psnr_db'], '.1f')} | {markdown_cells(row['achieved'])} |")
    return "\n".join(lines) + "\n"
