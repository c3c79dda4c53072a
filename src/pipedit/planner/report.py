"""Text tables of the planner's predictions, and the best configuration as an engine config."""

from __future__ import annotations

from .. import families
from .memory import RANK_HOST_BYTES, idle_expert_host_bytes
from .search import Prediction, Problem

GIB = 1024 ** 3


def _row(index: str, x: Prediction, problem: Problem) -> str:
    c = x.candidate
    chunk = "off" if c.chunk is None else str(c.chunk)
    limit = problem.limit_s() * problem.prompts
    experts = f" {c.idle_expert:>9}" if problem.model.experts > 1 else ""
    return (f"{index:>4} {c.decode_ranks:>6} {f'{c.ulysses}x{c.ring}':>5} {chunk:>6} {'on' if c.aco else 'off':>4} "
            f"{'on' if c.tiled else 'off':>6} {x.latency_s:>10.2f} {x.batch_s:>10.2f} {x.peak_bytes / GIB:>9.1f} "
            f"{x.host_bytes / GIB:>9.1f} {x.batch_s / limit:>8.1f}x{experts}")


def plan_table(problem: Problem, fitting: list[Prediction], too_big: list[Prediction], top: int) -> str:
    m, n, s = problem.model, problem.node, problem.shape
    limit = problem.limit_s()
    links = "gloo" if n.gpu.host_cores else n.interconnect
    if n.nodes > 1:
        links += f"; {n.nodes} nodes of {n.gpus_per_node}, {n.inter_node_bandwidth * 8 / 1e9:g} Gb/s between nodes"
    peak = f"{n.gpu.peak_flops / 1e12:.1f} TFLOPS" if n.gpu.peak_flops >= 1e12 else f"{n.gpu.peak_flops / 1e9:.1f} GFLOPS"
    head = (f"{m.name} on {n.gpus}x {n.gpu.name} ({links}), {s.width}x{s.height}x{s.frames}, "
            f"{problem.steps} steps, {problem.prompts} prompt(s)\n"
            f"physical limit: {limit:.2f} s per request = DiT FLOPs at {n.gpus} x {peak} dense peak "
            f"({limit * problem.prompts:.2f} s for the batch)\n")
    columns = (f"{'rank':>4} {'decode':>6} {'uxr':>5} {'pipesp':>6} {'aco':>4} {'tiling':>6} "
               f"{'latency s':>10} {'batch s':>10} {'peak GiB':>9} {'host GiB':>9} {'vs limit':>9}"
               + (f" {'idle exp.':>9}" if m.experts > 1 else ""))
    lines = [head, columns, "-" * len(columns)]
    lines += [_row(str(i + 1), x, problem) for i, x in enumerate(fitting[:top])]
    if len(fitting) > top:
        lines.append(f"     ... {len(fitting) - top} more fitting configurations")
    if not fitting:
        lines.append("     no configuration fits in GPU memory")
    if too_big:
        lines.append(f"does not fit in {n.gpu.memory / GIB:.0f} GiB per GPU ({len(too_big)} configurations, "
                     f"not ranked; fastest shown):")
        lines += [_row("-", x, problem) for x in too_big[:3]]
    lines.append("latency: one request alone, end to end; batch: all prompts submitted at once; "
                 "vs limit: batch time / physical limit")
    lines.append(_host_note(problem))
    if m.experts > 1:
        lines.append(f"idle exp.: model.idle_expert; resident holds all {m.experts} experts on every denoise GPU, "
                     f"offload one (the idle one waits in host memory; two swaps per request, each one "
                     f"host-to-device copy)")
    return "\n".join(lines)


def _host_note(problem: Problem) -> str:
    if problem.node.gpu.host_cores:
        return "host GiB: the node's host memory, every rank together (CPU ranks: each rank's peak above)"
    note = (f"host GiB: the node's host memory while serving, every rank together: "
            f"{RANK_HOST_BYTES / GIB:.1f} GiB of each rank's own")
    expert = idle_expert_host_bytes(problem.model, "offload")
    if expert:
        note += (f"; with the idle expert offloaded, its checkpoint files ({expert / GIB:.1f} GiB) memory-mapped "
                 f"once per node (page cache, shared by every rank; loading builds the expert onto the mapping)")
    return note


def engine_config_yaml(problem: Problem, best: Prediction, model_path: str | None, device: str) -> str:
    """The best configuration as a YAML engine config (pipedit.config.load_config reads it)."""
    import yaml

    c, s = best.candidate, problem.shape
    data: dict = {
        "model": {"path": model_path, "device": device, "dtype": "bfloat16" if device == "cuda" else "float32",
                  "vae_tiling": "on" if c.tiled else "off"},
        "parallel": {"ulysses": c.ulysses, "ring": c.ring, "decode_ranks": c.decode_ranks,
                     "pipesp_chunk": "off" if c.chunk is None else c.chunk, "aco": "on" if c.aco else "off"},
        "generation": {"height": s.height, "width": s.width, "num_frames": s.frames, "steps": problem.steps},
    }
    if problem.node.nodes > 1:
        data["parallel"]["nodes"] = problem.node.nodes
    if families.family(problem.model.family).planner.names_itself:
        data["model"]["name"] = problem.model.family
    if problem.model.experts > 1:
        data["model"]["idle_expert"] = c.idle_expert
    note = (f"# Written by `pipedit plan`: the best of the planner's configurations for {problem.model.name} "
            f"on {problem.node.gpus}x {problem.node.gpu.name}\n# ({problem.prompts} prompt(s): predicted "
            f"{best.batch_s:.1f} s for the batch, {best.latency_s:.1f} s per request alone).\n")
    if model_path is None:
        note += "# model.path null runs the embedded demo model: set it to your checkpoint folder.\n"
    return note + yaml.safe_dump(data, sort_keys=False)
