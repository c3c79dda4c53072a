"""`pipedit plan --validate-published`: the planner against published multi-GPU runs of the models
it plans, each cell as its source prints it (nothing here is estimated or read off a chart).

Sources (read at the commits named; numbers typed as printed there):
- xDiT, docs/performance/hunyuanvideo.md: HunyuanVideo, 129 frames, 50 steps, Ulysses latency in
  seconds per video on 1-8 GPUs, run with the official HunyuanVideo code. Its H20 and L20 rows are
  not here (the planner has no profile for either); the file does not say SXM or PCIe (NVLink assumed).
- LightX2V, README.md "Performance Benchmarks (Updated on 2025.12.01)", H100 table: Wan2.1 I2V 14B
  at 480P, 81 frames, 40 steps, with CFG, seconds per step of six frameworks on 1 and 8 GPUs
  (SGLang Diffusion's own publications show their Wan figures as charts only; its cells here are the
  ones LightX2V measured). It states neither the parallel degrees nor the resolution in pixels:
  832x480 (Wan's 480P size) and Ulysses over all GPUs are assumed.
The other models of xDiT's performance pages (CogVideoX, Step-Video, Flux, SD3, ...) are not models
the planner plans.

Each cell is predicted on the planner's datasheet profile of that GPU: a video cell as one request
alone, denoising and decoding on the same GPUs (no decode ranks, synchronous Ulysses, tiled VAE
where the model tiles); a step cell as step_seconds of that layout. The xDiT HunyuanVideo cells are
the ones the sequence-parallel overhead (hardware.SP_OVERHEAD) is fitted to: they state their
parallel degrees and run stock bf16 kernels. The Wan cells are printed beside them, not fitted:
their frameworks differ in kernels (8-bit attention, fused norms) more than in parallelism, and
their layouts are not stated.

The cells and their sources are the families' (each entry's planner.published: a Published set).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from .. import families
from .cost import Layout, Shape, step_seconds
from .hardware import GpuProfile, make_node, profile
from .search import Candidate, Problem, predict
from .validation import Cell, Published

_DECLARED: tuple[Published, ...] = tuple(families.load(entry.planner.published) for entry in families.families()
                                         if entry.planner.published)
SOURCES = {key: text for declared in _DECLARED for key, text in declared.sources.items()}
SPECS = {name: spec for declared in _DECLARED for name, spec in declared.specs.items()}
CELLS = tuple(cell for declared in _DECLARED for cell in declared.cells)


@dataclass(frozen=True)
class Row:
    cell: Cell
    predicted: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.cell.seconds


def predict_cell(cell: Cell, sp_overhead: float | None = None) -> float:
    """Seconds per video or per step; `sp_overhead` replaces the profile's (None: as it is)."""
    prof: GpuProfile = profile(cell.gpu)
    if sp_overhead is not None:
        prof = replace(prof, sp_overhead=sp_overhead)
    model = SPECS[cell.model]()
    node = make_node(prof, cell.gpus, "nvlink")
    shape = Shape(cell.height, cell.width, cell.frames)
    if cell.per == "step":
        return step_seconds(model, shape, node, Layout(cell.ulysses, cell.gpus // cell.ulysses))
    candidate = Candidate(0, cell.ulysses, cell.gpus // cell.ulysses, None, False, model.vae_tiling)
    return predict(Problem(model, node, shape, cell.steps, 1), candidate).latency_s


def validate(sp_overhead: float | None = None) -> list[Row]:
    return [Row(cell, predict_cell(cell, sp_overhead)) for cell in CELLS]


def speedup_ratios(rows: list[Row]) -> list[float]:
    """Per multi-GPU cell with a one-GPU cell in its series: predicted / published speedup."""
    single = {r.cell.series: r for r in rows if r.cell.gpus == 1}
    return [(single[r.cell.series].predicted / r.predicted) / (single[r.cell.series].cell.seconds / r.cell.seconds)
            for r in rows if r.cell.gpus > 1 and r.cell.series in single]


def fit_sp_overhead(grid_step: float = 0.005, top: float = 0.2) -> float:
    """The overhead on the grid whose median predicted/published speedup over the fitted cells is
    closest to 1 (hardware.SP_OVERHEAD is this value; a test keeps them equal)."""
    fitted = [c for c in CELLS if c.fitted]

    def miss(value: float) -> float:
        rows = [Row(c, predict_cell(c, value)) for c in fitted]
        return abs(math.log(statistics.median(speedup_ratios(rows))))

    grid = [round(i * grid_step, 6) for i in range(int(round(top / grid_step)) + 1)]
    return min(grid, key=miss)


def median_ratio(rows: list[Row]) -> float:
    return statistics.median(r.ratio for r in rows)


def format_rows(rows: list[Row], unmodelled: list[Row]) -> str:
    """`unmodelled`: the same cells predicted without the sequence-parallel overhead."""
    header = (f"{'framework':<13} {'model':<13} {'gpu':<4} {'gpus':>4} {'layout':<6} {'shape':<12} {'steps':>5} "
              f"{'s per':<5} {'published':>9} {'predicted':>9} {'ratio':>5}  source")
    lines = [header, "-" * len(header)]
    for r in rows:
        c = r.cell
        layout = f"u{c.ulysses}" + ("" if c.stated else "?")
        lines.append(f"{c.framework:<13} {c.model:<13} {c.gpu:<4} {c.gpus:>4} {layout:<6} "
                     f"{f'{c.width}x{c.height}x{c.frames}':<12} {c.steps:>5} {c.per:<5} {c.seconds:>9.2f} "
                     f"{r.predicted:>9.2f} {r.ratio:>5.2f}  [{c.source}]")
    fitted = [r for r in rows if r.cell.fitted]
    multi = [r for r in rows if r.cell.gpus > 1]
    lines.append("layout: u<n> Ulysses degree; ? the source does not state it (assumed); ratio: predicted / published")
    lines += [f"[{key}] {text}" for key, text in SOURCES.items()]
    lines.append(f"median predicted/published: {median_ratio(rows):.2f} all {len(rows)} cells "
                 f"({median_ratio(unmodelled):.2f} without the sequence-parallel overhead), "
                 f"{median_ratio(multi):.2f} multi-GPU cells ({median_ratio(_same(unmodelled, multi)):.2f}), "
                 f"{median_ratio(fitted):.2f} xDiT HunyuanVideo cells ({median_ratio(_same(unmodelled, fitted)):.2f})")
    lines.append(f"median predicted/published speedup over one GPU, xDiT HunyuanVideo: "
                 f"{statistics.median(speedup_ratios(fitted)):.2f} "
                 f"({statistics.median(speedup_ratios(_same(unmodelled, fitted))):.2f} without the overhead)")
    return "\n".join(lines)


def _same(rows: list[Row], like: list[Row]) -> list[Row]:
    cells = {r.cell for r in like}
    return [r for r in rows if r.cell in cells]
