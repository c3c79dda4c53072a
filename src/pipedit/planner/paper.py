"""`pipedit plan --validate-paper`: the planner against the PipeDiT paper's headline table
(seconds for 10 consecutive videos, 8 GPUs, base -> PipeDiT).

How each side is predicted (the same global profiles as `pipedit plan`, nothing per cell):
- base: the stock framework with sequence parallelism over all 8 GPUs (each family's layout:
  HunyuanVideo USP Ulysses 4 x Ring 2, OpenSoraPlan Ulysses 8) and CPU offloading: per request the text encoder,
  the DiT and the VAE each move onto every GPU and back (PCIe 4.0, shared host), denoise and
  decode run one after the other on the same GPUs.
- PipeDiT: DeDiVAE with the decode-rank count from the balance rule on the cost model's
  single-GPU times, the denoise ranks split by split_denoise_ranks (Ulysses as far as the heads
  allow), PipeSP with one head per chunk, and Aco on (the paper's setting).
- The VAE decodes tiled when an untiled decode would not fit in the GPU's memory (pipedit's
  auto rule), on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import families
from .cost import Layout, Shape, decode_seconds, step_seconds
from .hardware import node
from .memory import vae_decode_peak_bytes
from .models import full_size
from .rules import balance_decode_ranks, split_denoise_ranks
from .search import Candidate, Problem, predict
from .validation import PaperCells

PROMPTS = 10
GPUS = 8
# The families' rows (each entry's planner.paper), in the paper's table order, PIPEDIT-PAPER §5.
_DECLARED: tuple[PaperCells, ...] = tuple(sorted(
    (families.load(entry.planner.paper) for entry in families.families() if entry.planner.paper),
    key=lambda declared: declared.table_position))
# (model, gpu, width, height, frames, steps) -> (base s, PipeDiT s)
HEADLINE = {(declared.model, *cell): seconds for declared in _DECLARED for cell, seconds in declared.rows.items()}
BASE_LAYOUT = {declared.model: declared.base_layout for declared in _DECLARED}
TOLERANCE = 0.25
INTERCONNECT = {"a6000": "nvlink", "l40": "pcie"}  # A6000: NVLink pairs + PCIe 4.0; L40: PCIe only


@dataclass(frozen=True)
class Row:
    cell: tuple
    paper_base: float
    paper_pipedit: float
    base: float
    pipedit: float
    pipedit_config: Candidate

    @property
    def paper_speedup(self) -> float:
        return self.paper_base / self.paper_pipedit

    @property
    def speedup(self) -> float:
        return self.base / self.pipedit

    @property
    def within(self) -> bool:
        return abs(self.speedup / self.paper_speedup - 1) <= TOLERANCE


def _tiled(problem: Problem) -> bool:
    """pipedit's auto rule on a decode rank that also holds the text encoder."""
    m = problem.model
    free = problem.node.gpu.memory - 2 * (m.vae_params + m.text_params)
    return vae_decode_peak_bytes(m, problem.shape, False) > 0.9 * free


def predict_cell(cell: tuple) -> Row:
    model_name, gpu, width, height, frames, steps = cell
    model = full_size(model_name)
    problem = Problem(model, node(gpu, GPUS, INTERCONNECT[gpu]), Shape(height, width, frames), steps, PROMPTS)
    tiled = _tiled(problem)
    base_u, base_r = BASE_LAYOUT[model_name]
    base = predict(problem, Candidate(0, base_u, base_r, None, False, tiled, offload=True))
    one_gpu = step_seconds(model, problem.shape, problem.node, Layout()) * steps
    decode = balance_decode_ranks(one_gpu, decode_seconds(model, problem.shape, problem.node, tiled), GPUS)
    ulysses, ring = split_denoise_ranks(GPUS - decode, model.heads)
    config = Candidate(decode, ulysses, ring, 1 if ulysses > 1 else None, ring == 1, tiled)
    pipedit = predict(problem, config)
    return Row(cell, *HEADLINE[cell], base.batch_s, pipedit.batch_s, config)


def validate() -> list[Row]:
    return [predict_cell(cell) for cell in HEADLINE]


def format_rows(rows: list[Row]) -> str:
    header = (f"{'model':<14} {'gpu':<6} {'shape':<12} {'steps':>5} | {'paper base':>10} {'PipeDiT':>8} "
              f"{'speedup':>7} | {'pred base':>9} {'PipeDiT':>8} {'speedup':>7} | {'ok':<3} config")
    lines = [header, "-" * len(header)]
    for r in rows:
        model, gpu, width, height, frames, steps = r.cell
        c = r.pipedit_config
        lines.append(
            f"{model:<14} {gpu:<6} {f'{width}x{height}x{frames}':<12} {steps:>5} | {r.paper_base:>10.0f} "
            f"{r.paper_pipedit:>8.0f} {r.paper_speedup:>6.2f}x | {r.base:>9.0f} {r.pipedit:>8.0f} "
            f"{r.speedup:>6.2f}x | {'yes' if r.within else 'no':<3} decode {c.decode_ranks}, "
            f"u{c.ulysses}xr{c.ring}{', aco' if c.aco else ''}{', tiled' if c.tiled else ''}")
    hits = sum(r.within for r in rows)
    lines.append(f"{hits} of {len(rows)} predicted speedups within {TOLERANCE:.0%} of the paper's")
    return "\n".join(lines)
