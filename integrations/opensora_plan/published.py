"""OpenSoraPlan v1.3's rows of the PipeDiT paper's headline table (pipedit.planner.paper;
PIPEDIT-PAPER §5; base: Ulysses 8 over 8 GPUs)."""

from __future__ import annotations

from pipedit.planner.validation import PaperCells

PAPER = PaperCells(model="opensora-plan", base_layout=(8, 1), table_position=0, rows={
    ("a6000", 480, 352, 97, 10): (227, 107),
    ("a6000", 1024, 576, 97, 10): (555, 430),
    ("a6000", 480, 352, 97, 50): (622, 502),
    ("a6000", 1024, 576, 97, 50): (2162, 1832),
    ("l40", 480, 352, 97, 10): (252, 154),
    ("l40", 1024, 576, 97, 10): (731, 591),
    ("l40", 480, 352, 97, 50): (738, 657),
    ("l40", 1024, 576, 97, 50): (2940, 2689),
})
