"""What a family declares of the published runs its models are checked against (its
pipedit.families entry's planner.published and planner.paper targets): `pipedit plan
--validate-published` reads the Published sets, `--validate-paper` the PaperCells."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .models import ModelSpec


@dataclass(frozen=True)
class Cell:
    framework: str
    model: str  # a key of its Published set's specs
    gpu: str  # the planner profile
    gpus: int
    ulysses: int
    stated: bool  # the source states the parallel degrees (else: Ulysses over all GPUs, assumed)
    width: int
    height: int
    frames: int
    steps: int
    per: str  # "video": end to end, one request; "step": one denoising step
    seconds: float
    source: str  # a key of its Published set's sources
    fitted: bool = False  # the sequence-parallel overhead (hardware.SP_OVERHEAD) is fitted to this cell

    @property
    def series(self) -> tuple:
        """Cells that differ only in GPU count."""
        return self.framework, self.model, self.gpu, self.width, self.height, self.frames, self.steps, self.per


@dataclass(frozen=True)
class Published:
    """A family's published multi-GPU runs, each cell as its source prints it."""

    sources: dict[str, str]  # source key: where the numbers were read (file, commit, table)
    specs: dict[str, Callable[[], ModelSpec]]  # the models its cells name
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class PaperCells:
    """A family's rows of the PipeDiT paper's headline table (seconds for 10 consecutive videos on
    8 GPUs, base -> PipeDiT)."""

    model: str  # the full-size model the rows are predicted with
    base_layout: tuple[int, int]  # the stock framework's (Ulysses, ring) over the 8 GPUs
    rows: dict[tuple[str, int, int, int, int], tuple[float, float]] = field(default_factory=dict)
    # (gpu, width, height, frames, steps) -> (base s, PipeDiT s)
    table_position: int = 0  # where the paper's table lists the model (its rows print in that order)
