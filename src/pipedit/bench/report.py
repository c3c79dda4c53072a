"""Writers for the `bench latency` report: latency.json (every figure), latency.md (a table),
latency.png (batch time and per-step latency per cell, one bar per method)."""

from __future__ import annotations

import json
from pathlib import Path

from .rates import markdown_cells

MIB = 2**20


def write_reports(report: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "latency.json", out_dir / "latency.md", out_dir / "latency.png"]
    paths[0].write_text(json.dumps(report, indent=1) + "\n")
    paths[1].write_text(markdown(report))
    write_png(report, paths[2])
    return paths


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _layout(layout: dict) -> str:
    chunk = "sync" if layout["pipesp_chunk"] is None else f"chunk {layout['pipesp_chunk']}"
    text = f"{layout['strategy']} u{layout['ulysses']}xr{layout['ring']}, {chunk}, decode {layout['decode_ranks']}"
    text += ", aco" if layout["aco"] else ""
    return text + (", offload" if layout["offload_idle"] else "")


def markdown(report: dict) -> str:
    env, settings = report["environment"], report["settings"]
    gpus = ", ".join(sorted({g["name"] for g in env["gpus"]})) or f"CPU ({env['cpu_usable']} usable cores)"
    lines = [
        f"# bench latency: {settings['model']}, {settings['prompts']} prompts per cell, {settings['ranks']} ranks",
        "",
        f"Devices: {gpus}; interconnect {env['interconnect']}; torch {env['versions']['torch']}, "
        f"diffusers {env['versions']['diffusers']}. Warm-up: {settings['warmup']}. Peak memory: {settings['peak_memory']}.",
        "",
        f"Step TFLOP/s: the cost model's DiT FLOPs of a step over the step median, per denoise rank; "
        f"{report['matmul']['text']}.",
        "",
        "| method | W x H x frames | steps | layout | batch s | step median ms | step mean ms | request mean s "
        "| request max s | peak MiB (max rank) | aco steps | step TFLOP/s | of matmul |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in report["cells"]:
        requests = cell["per_request_s"]
        mean = f"{sum(requests) / len(requests):.2f}" if requests else "-"
        top = f"{max(requests):.2f}" if requests else "-"
        failed = f" ({len(cell['failures'])} failed)" if cell["failures"] else ""
        lines.append(
            f"| {cell['method']} | {cell['width']}x{cell['height']}x{cell['frames']} | {cell['steps']} | "
            f"{_layout(cell['layout'])} | {cell['batch_time_s']:.2f}{failed} | {_ms(cell['per_step_s']['median'])} | "
            f"{_ms(cell['per_step_s']['mean'])} | {mean} | {top} | "
            f"{max(cell['peak_memory_bytes'].values()) / MIB:.0f} | {cell['aco_steps']} | "
            f"{markdown_cells((cell['achieved'] or {}).get('per_step_median'))} |"
        )
    return "\n".join(lines) + "\n"


def write_png(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(cell["method"] for cell in report["cells"]))
    shapes = list(dict.fromkeys((c["width"], c["height"], c["frames"], c["steps"]) for c in report["cells"]))
    by_key = {(c["method"], (c["width"], c["height"], c["frames"], c["steps"])): c for c in report["cells"]}
    figure, axes = plt.subplots(1, 2, figsize=(max(8, 2.5 * len(shapes) + 4), 4.5))
    width = 0.8 / len(methods)
    panels = ((axes[0], "batch time (s)", lambda c: c["batch_time_s"]),
              (axes[1], "per-step latency, median (ms)", lambda c: (c["per_step_s"]["median"] or 0) * 1e3))
    for axis, title, value in panels:
        for i, method in enumerate(methods):
            xs = [j + (i - (len(methods) - 1) / 2) * width for j in range(len(shapes))]
            ys = [value(by_key[method, shape]) if (method, shape) in by_key else 0 for shape in shapes]
            axis.bar(xs, ys, width, label=method)
        axis.set_xticks(range(len(shapes)), [f"{w}x{h}x{f}\n{s} steps" for w, h, f, s in shapes], fontsize=8)
        axis.set_title(title)
    axes[0].legend(fontsize=8)
    settings = report["settings"]
    figure.suptitle(f"{settings['model']}: {settings['prompts']} prompts per cell, {settings['ranks']} ranks "
                    f"({report['environment']['device_type']})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
