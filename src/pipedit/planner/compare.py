"""`pipedit plan --compare latency.json`: the planner's prediction for every cell that
`pipedit bench latency` measured, on the same layout, beside the measured batch time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError
from .cost import Shape
from .hardware import Node
from .models import ModelSpec
from .search import Candidate, Problem, predict

WITHIN = 0.30


@dataclass(frozen=True)
class Compared:
    cell: dict
    candidate: Candidate
    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1


def read_cells(path: str | Path) -> list[dict]:
    file = Path(path)
    try:
        report = json.loads(file.read_text())
        cells = report["cells"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserInputError(f"--compare {file}: not a `pipedit bench latency` JSON report ({error})") from error
    return [c for c in cells if c.get("batch_time_s") and not c.get("failures")]


def candidate_of(cell: dict) -> Candidate:
    layout = cell["layout"]
    return Candidate(decode_ranks=int(layout.get("decode_ranks") or 0), ulysses=int(layout["ulysses"]),
                     ring=int(layout["ring"]), chunk=layout.get("pipesp_chunk"), aco=bool(layout.get("aco")),
                     tiled=False, offload=bool(layout.get("offload_idle")))


def compare(cells: list[dict], model: ModelSpec, node_for: callable) -> list[Compared]:
    """node_for(ranks) -> Node: the hardware each cell ran on."""
    rows = []
    for cell in cells:
        node: Node = node_for(int(cell["ranks"]))
        problem = Problem(model, node, Shape(cell["height"], cell["width"], cell["frames"]), cell["steps"],
                          cell["prompts"])
        candidate = candidate_of(cell)
        rows.append(Compared(cell, candidate, predict(problem, candidate).batch_s, float(cell["batch_time_s"])))
    return rows


def format_compared(rows: list[Compared]) -> str:
    header = (f"{'method':<8} {'shape':<14} {'steps':>5} {'K':>3} {'layout':<22} {'measured s':>10} "
              f"{'predicted s':>11} {'error':>7}")
    lines = [header, "-" * len(header)]
    for r in rows:
        c, k = r.candidate, r.cell
        layout = f"d{c.decode_ranks} u{c.ulysses}xr{c.ring} pipesp {c.chunk or 'off'}{' aco' if c.aco else ''}"
        shape = f"{k['width']}x{k['height']}x{k['frames']}"
        lines.append(f"{k['method']:<8} {shape:<14} {k['steps']:>5} "
                     f"{k['prompts']:>3} {layout:<22} {r.measured_s:>10.2f} {r.predicted_s:>11.2f} {r.error:>+6.0%}")
    within = sum(abs(r.error) <= WITHIN for r in rows)
    lines.append(f"{within} of {len(rows)} cells predicted within {WITHIN:.0%} of the measured batch time")
    for shape, group in _by_shape(rows).items():
        fastest = min(group, key=lambda r: r.measured_s)
        chosen = min(group, key=lambda r: r.predicted_s)
        gap = chosen.measured_s / fastest.measured_s - 1
        lines.append(f"{shape}: planner picks {chosen.cell['method']} (measured {chosen.measured_s:.2f} s), "
                     f"fastest measured {fastest.cell['method']} ({fastest.measured_s:.2f} s): "
                     f"{'the same' if chosen is fastest else f'{gap:+.0%}'}")
    return "\n".join(lines)


def _by_shape(rows: list[Compared]) -> dict[str, list[Compared]]:
    groups: dict[str, list[Compared]] = {}
    for r in rows:
        k = r.cell
        groups.setdefault(f"{k['width']}x{k['height']}x{k['frames']}, {k['steps']} steps", []).append(r)
    return groups
