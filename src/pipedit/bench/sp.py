"""Benchmarks that print figures. Timings come from inside the workers; ratios compare modes
measured in the same run, on the same ranks. Each model step's row also gives its TFLOP/s per
denoise rank and share of the matmul rate measured on rank 0 (pipedit.bench.rates)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import torch

from ..attention.autotune import AttentionShape, chunk_candidates, measure_chunks, pick_faster
from ..attention.registry import get_attention_strategy
from ..config import EngineConfig, ParallelConfig
from ..distributed.context import ParallelContext
from ..distributed.spawn import run_on_gloo_ranks
from ..images import placeholder_for
from ..request import VideoRequest
from .rates import COLUMNS, StepRates, model_spec, rank_matmul_rate


def _chunk_list(config: EngineConfig, heads: int, chunks: list[int] | None) -> list:
    if chunks is None:  # every candidate auto considers
        chunks = [c for c in chunk_candidates(config.parallel.ulysses, heads) if c is not None]
    return [None, *chunks, "auto"]


def bench_sp(config: EngineConfig, request: VideoRequest, chunks: list[int] | None, repeats: int,
             single_device: bool = False) -> str:
    """The per-step table; with config.model.compile, the eager and the compiled tables and the
    compile time (each first forward, which compiles, against the eager first forward)."""
    if config.parallel.ulysses < 2:
        from ..errors import UserInputError

        raise UserInputError("bench sp compares Ulysses all-to-all modes: use --ulysses 2 or more")
    config = config.with_overrides("parallel", pipesp_chunk="auto")
    if not config.model.compile:
        heads, results, _, rates = _measure(config, request, chunks, repeats, single_device)
        return format_sp_table(config, request, heads, results, rates=rates)
    eager_config = replace(config, model=replace(config.model, compile=False))
    heads, eager, eager_first, rates = _measure(eager_config, request, chunks, repeats, single_device)
    _, compiled, compiled_first, _ = _measure(config, request, chunks, repeats, single_device, rates)
    return "\n".join([format_sp_table(eager_config, request, heads, eager, "eager", rates),
                      format_sp_table(config, request, heads, compiled, "compiled (--compile)", rates),
                      format_compile_summary(eager, compiled, eager_first, compiled_first)])


def _measure(config: EngineConfig, request: VideoRequest, chunks: list[int] | None, repeats: int,
             single_device: bool, rates: StepRates | None = None) -> tuple[int, dict, dict, StepRates]:
    """(heads, per-mode step times, first-forward seconds by world: "sp" and "single", the run's
    StepRates: the matmul rate measured on rank 0 unless `rates` has it already). Each mode's row
    gets its step's FLOPs and the ranks that shared it."""
    from ..runtime.engine import Engine, resolve_model_path

    with Engine(config) as engine:
        request = placeholder_for(request, engine.needs_image)  # image-to-video checkpoints
        if rates is None:  # once per bench run, on a rank's device
            rates = StepRates(model_spec(resolve_model_path(config.model.path, config.model.name), config.model.name),
                              rank_matmul_rate(engine.executor))
        cond = engine.executor.call_rank(0, "encode_prompt", request)
        heads = engine.executor.call_rank(0, "num_heads")
        labels = _chunk_list(config, heads, chunks)
        engine.executor.call("begin", request, cond)
        first = {"sp": max(engine.executor.call("time_forward", False))}  # compiles, with --compile
        results = engine.executor.call("time_steps", request, cond, labels, repeats)[0]
        devices = engine.layout.denoise
    if single_device:
        first["single"], step_s = time_single_device(config, request, cond, repeats)
        branches = next(iter(results.values()))["cfg_branches"]  # the same request, one forward each
        results["single"] = {"chunk": None, "step_s": step_s, "cfg_branches": branches, "devices": 1}
    for row in results.values():
        row.setdefault("devices", devices)
        row["flops"] = rates.step_flops(request.height, request.width, request.num_frames, row["cfg_branches"])
    return heads, results, first, rates


def time_single_device(config: EngineConfig, request: VideoRequest, cond: dict, repeats: int) -> tuple[float, float]:
    """(first, median of the next `repeats`) seconds of one transformer forward on one
    in-process rank; the first warms up (and compiles, with model.compile)."""
    from ..runtime.engine import Engine

    single = replace(config, parallel=ParallelConfig(pipesp_chunk="off", aco="off"))
    with Engine(single) as engine:
        engine.executor.call("begin", request, cond)
        times = [engine.executor.call("time_forward", False)[0] for _ in range(repeats + 1)]
    return times[0], statistics.median(times[1:])


def _attention_rank(rank: int, world_size: int, shape: AttentionShape, rounds: int) -> dict:
    ctx = ParallelContext.create(world_size, 1)
    strategy = get_attention_strategy("ulysses", ctx, num_heads=shape.heads)
    return measure_chunks(strategy, ctx, shape, torch.float32, rounds=rounds)


def bench_sp_attention(ulysses: int, shape: AttentionShape, rounds: int) -> str:
    """One attention call at a model's real head layout, on `ulysses` local gloo ranks (CPU)."""
    samples = run_on_gloo_ranks(_attention_rank, ulysses, shape, rounds, timeout_s=1800)[0]
    medians = {chunk: statistics.median(times) for chunk, times in samples.items()}
    auto = pick_faster(samples)
    results = {key: {"chunk": key, "step_s": value} for key, value in medians.items()}
    results["auto"] = {"chunk": auto, "step_s": medians[auto]}
    title = (f"attention call, {ulysses} gloo ranks (ulysses), {shape.seq_len} video + {shape.text_len} text tokens, "
             f"{shape.heads} heads x {shape.head_dim}, median of {rounds} interleaved rounds")
    return format_table(title, "ms/call", results)


def _label(key) -> str:
    if key is None:
        return "sync ulysses"
    if key == "single":
        return "single device"
    return "auto" if key == "auto" else f"pipesp chunk {key}"


def format_sp_table(config: EngineConfig, request: VideoRequest, heads: int, results: dict, label: str = "",
                    rates: StepRates | None = None) -> str:
    p = config.parallel
    title = (f"per-step latency{f' {label}' if label else ''}, {p.ulysses * p.ring} ranks (ulysses {p.ulysses} x "
             f"ring {p.ring}), {request.height}x{request.width}x{request.num_frames}, {heads} heads, "
             f"device {config.model.device_type()}")
    return format_table(title, "ms/step", results, rates)


def format_compile_summary(eager: dict, compiled: dict, eager_first: dict, compiled_first: dict) -> str:
    """Compile time per world (first compiled forward minus first eager forward: both pay the
    same one-time warm-ups, so the difference is dynamo + inductor) and the steady-state ratio."""
    lines = [f"{'compile':<16} {'first eager s':>14} {'first compiled s':>17} {'compile s':>10}"]
    for world, first in compiled_first.items():
        lines.append(f"{world:<16} {eager_first[world]:>14.2f} {first:>17.2f} {first - eager_first[world]:>10.2f}")
    lines.append(f"{'mode':<16} {'eager ms':>14} {'compiled ms':>17} {'speedup':>10}")
    for key, row in compiled.items():
        before = eager[key]["step_s"]
        lines.append(f"{_label(key):<16} {before * 1e3:>14.2f} {row['step_s'] * 1e3:>17.2f} "
                     f"{before / row['step_s']:>9.3f}x")
    return "\n".join(lines)


def format_table(title: str, unit: str, results: dict, rates: StepRates | None = None) -> str:
    """Rows: sync ulysses, each chunk, auto; `step_s` seconds each; speedup vs the sync row; with
    `rates`, TFLOP/s per rank of the row's `flops` (a step's, over its `devices`) and the share of
    the matmul rate."""
    baseline = results[None]["step_s"]
    head = f"{'mode':<16} {'chunk':>6} {unit:>10} {'speedup vs sync':>16}"
    single = " (the single device: 1)" if "single" in results else ""
    lines = [title] + ([rates.header() + single] if rates else [])
    lines.append(head + (f" {COLUMNS}" if rates else ""))
    for key, row in results.items():
        chunk = "-" if row["chunk"] is None else str(row["chunk"])
        line = f"{_label(key):<16} {chunk:>6} {row['step_s'] * 1e3:>10.2f} {baseline / row['step_s']:>15.3f}x"
        if rates:
            line += " " + rates.columns(row["flops"], row["step_s"], row["devices"])
        lines.append(line)
    return "\n".join(lines)
