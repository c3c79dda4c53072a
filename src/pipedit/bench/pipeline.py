"""`pipedit bench pipeline`: K prompts (a) sequentially on the same ranks (each request decoded
before the next starts), (b) with DeDiVAE (request k decodes while k+1 denoises), (c) DeDiVAE
with Aco. All three run on one world, so the figures compare like with like. Each mode's
denoising also gets its rate: the cost model's DiT FLOPs of a request over its mean denoise_s
(the steps only, prompt encoding left out), per denoise rank, against the matmul rate measured
on rank 0 (pipedit.bench.rates)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..config import EngineConfig
from ..errors import UserInputError
from ..request import VideoRequest
from .batch import batch_requests, run_batch
from .rates import COLUMNS, StepRates, model_spec, rank_matmul_rate


@dataclass
class ModeFigures:
    name: str
    total_s: float
    latencies_s: list[float]  # completion time of each request from the batch start
    denoise_s: list[float]
    decode_s: list[float]
    aco_steps: int
    failures: int
    split: int = 0  # videos decoded by the whole decode group (parallel.split_decode)
    steps_s: list[float] = field(default_factory=list)  # each request's denoise_s: its steps, no encoding
    branches: list[float] = field(default_factory=list)  # each request's cfg_branches

    @property
    def throughput(self) -> float:
        return len(self.latencies_s) / self.total_s


def _requests(template: VideoRequest, count: int, needs_image: bool) -> list[VideoRequest]:
    return batch_requests(template.height, template.width, template.num_frames, template.steps, count, needs_image)


def _run_mode(engine, name: str, requests: list[VideoRequest], **options) -> ModeFigures:
    run = run_batch(engine, requests, **options)
    return ModeFigures(name, run.total_s, run.latencies_s,
                       [r.timings["encode_s"] + r.timings["denoise_s"] for r in run.results],
                       [r.timings["decode_s"] for r in run.results], run.aco_steps, len(run.failures),
                       sum(r.timings.get("decode_ranks", 1) > 1 for r in run.results),
                       [r.timings["denoise_s"] for r in run.results], [r.timings["cfg_branches"] for r in run.results])


def bench_pipeline(config: EngineConfig, template: VideoRequest, prompts: int, repeats: int = 3) -> str:
    """Runs the three modes `repeats` times, interleaved (machine noise hits all of them alike),
    and reports each mode's median run."""
    from ..runtime.engine import Engine, resolve_model_path

    if config.parallel.decode_ranks == 0:
        raise UserInputError("bench pipeline needs decode ranks: --decode-ranks N (or auto with --ranks)")
    spec = model_spec(resolve_model_path(config.model.path, config.model.name), config.model.name)
    with Engine(config) as engine:
        rates = StepRates(spec, rank_matmul_rate(engine.executor))  # once, on rank 0's device
        list(engine.generate_many(_requests(template, 1, engine.needs_image)))  # warm-up; settles Aco auto for this shape
        requests = _requests(template, prompts, engine.needs_image)
        modes = {"sequential": dict(pipelined=False, aco="off"), "dedivae": dict(pipelined=True, aco="off"),
                 f"dedivae+aco({engine.parallel.aco})": dict(pipelined=True)}
        runs: dict[str, list[ModeFigures]] = {name: [] for name in modes}
        for _ in range(repeats):
            for name, options in modes.items():
                runs[name].append(_run_mode(engine, name, requests, **options))
        memory = [engine.executor.call_rank(r, "peak_memory_bytes") for r in range(engine.layout.world_size)]
    medians = [sorted(figures, key=lambda f: f.total_s)[len(figures) // 2] for figures in runs.values()]
    return format_report(engine, template, medians, memory, repeats, rates)


def format_report(engine, template: VideoRequest, modes: list[ModeFigures], memory: list[int], repeats: int,
                  rates: StepRates | None = None) -> str:
    layout = engine.layout
    base = modes[0]
    # Per-request times as the sequential run spends them: everything up to the handoff counts
    # as denoising (prompt encoding included), the rest as decoding.
    t_denoise, t_decode = statistics.fmean(base.denoise_s), statistics.fmean(base.decode_s)
    ideal = (t_denoise + t_decode) / max(t_denoise, t_decode)
    lines = [
        f"{len(base.latencies_s)} prompts, {template.height}x{template.width}x{template.num_frames}, "
        f"{template.steps} steps; {layout.denoise} denoise ranks (ulysses {layout.ulysses} x ring {layout.ring}) + "
        f"{layout.decode} decode ranks; text encoder with the {layout.text_on}; median of {repeats} interleaved runs",
        f"per request (sequential run): T_denoise {t_denoise:.3f} s, T_decode {t_decode:.3f} s; "
        f"ideal bound (T_denoise + T_decode) / max = {ideal:.3f}x",
        f"{'mode':<18} {'total s':>8} {'mean latency s':>15} {'videos/s':>9} {'speedup':>8} {'of ideal':>9} {'aco steps':>10}",
    ]
    for mode in modes:
        speedup = base.total_s / mode.total_s
        of_ideal = "-" if mode is base else f"{speedup / ideal:.1%}"
        lines.append(
            f"{mode.name:<18} {mode.total_s:>8.2f} {statistics.fmean(mode.latencies_s):>15.2f} "
            f"{mode.throughput:>9.3f} {speedup:>7.3f}x {of_ideal:>9} {mode.aco_steps:>10}"
            + (f"  ({mode.split} split decodes)" if mode.split else "")
            + (f"  ({mode.failures} failed)" if mode.failures else "")
        )
    roles = ["denoise"] * layout.denoise + ["decode"] * layout.decode
    peak = ", ".join(f"rank {r} ({role}) {b / 2**20:.0f} MiB" for r, (role, b) in enumerate(zip(roles, memory)))
    lines.append(f"peak memory per rank ({'CUDA allocated' if engine.config.model.device_type() == 'cuda' else 'process RSS'}): {peak}")
    if rates is not None:
        lines += rate_lines(rates, template, modes, layout.denoise)
    return "\n".join(lines)


def rate_lines(rates: StepRates, template: VideoRequest, modes: list[ModeFigures], devices: int) -> list[str]:
    """Per mode: the DiT FLOPs of a request (cost model, its steps x the guidance branches they ran)
    over the mean denoise_s, per denoise rank."""
    lines = [rates.header() + f" ({devices})",
             f"{'denoising':<18} {'TFLOP/request':>14} {'denoise s':>10} {COLUMNS}"]
    for mode in modes:
        if not mode.steps_s:
            continue
        flops = template.steps * rates.step_flops(template.height, template.width, template.num_frames,
                                                  statistics.fmean(mode.branches))
        seconds = statistics.fmean(mode.steps_s)
        lines.append(f"{mode.name:<18} {flops / 1e12:>14.4g} {seconds:>10.4g} {rates.columns(flops, seconds, devices)}")
    return lines
