"""HunyuanVideo's published multi-GPU runs and its rows of the PipeDiT paper's headline table
(pipedit.planner.published, pipedit.planner.paper).

xDiT, docs/performance/hunyuanvideo.md: 129 frames, 50 steps, Ulysses latency in seconds per video
on 1-8 GPUs, run with the official HunyuanVideo code; the cells the sequence-parallel overhead is
fitted to. The paper's rows: PIPEDIT-PAPER §5 (base: USP Ulysses 4 x Ring 2 over 8 GPUs).
"""

from __future__ import annotations

from pipedit.planner.validation import Cell, PaperCells, Published

from .planner import hunyuan_video

XDIT = "xdit"


def _xdit(gpus: int, width: int, height: int, seconds: float) -> Cell:
    return Cell("xDiT", "hunyuan-video", "h100", gpus, gpus, True, width, height, 129, 50, "video", seconds, XDIT,
                fitted=True)


PUBLISHED = Published(
    sources={XDIT: "github.com/xdit-project/xDiT docs/performance/hunyuanvideo.md (commit 175e0bfec974), "
                   "'1280x720 Resolution' and '960x960 Resolution' tables, H100 rows"},
    specs={"hunyuan-video": hunyuan_video},
    cells=(_xdit(1, 1280, 720, 1904.08), _xdit(2, 1280, 720, 925.04), _xdit(4, 1280, 720, 514.08),
           _xdit(8, 1280, 720, 337.58),
           _xdit(1, 960, 960, 1735.01), _xdit(2, 960, 960, 934.09), _xdit(3, 960, 960, 645.45),
           _xdit(6, 960, 960, 367.02)),
)

PAPER = PaperCells(model="hunyuan-video", base_layout=(4, 2), table_position=1, rows={
    ("a6000", 480, 352, 97, 10): (540, 165),
    ("a6000", 1024, 576, 97, 10): (1399, 729),
    ("a6000", 480, 352, 97, 50): (965, 726),
    ("a6000", 1024, 576, 97, 50): (3726, 3453),
    ("l40", 480, 352, 97, 10): (676, 229),
    ("l40", 1024, 576, 97, 10): (2237, 1333),
    ("l40", 480, 352, 97, 50): (1350, 1068),
    ("l40", 1024, 576, 97, 50): (6952, 6453),
})
