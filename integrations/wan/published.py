"""Wan's published multi-GPU runs (pipedit.planner.published).

LightX2V, README.md "Performance Benchmarks (Updated on 2025.12.01)", H100 table: Wan2.1 I2V 14B at
480P, 81 frames, 40 steps, with CFG, seconds per step of six frameworks on 1 and 8 GPUs. It states
neither the parallel degrees nor the resolution in pixels: 832x480 (Wan's 480P size) and Ulysses
over all GPUs are assumed. Printed beside the fitted cells, not fitted.
"""

from __future__ import annotations

from pipedit.planner.validation import Cell, Published

from .planner import wan_i2v_14b

LIGHTX2V = "lightx2v"


def _lightx2v(framework: str, gpus: int, seconds: float) -> Cell:
    return Cell(framework, "wan-i2v-14b", "h100", gpus, gpus, gpus == 1, 832, 480, 81, 40, "step", seconds, LIGHTX2V)


PUBLISHED = Published(
    sources={LIGHTX2V: "github.com/ModelTC/LightX2V README.md (commit f8aee98b5462), 'Performance Benchmarks "
                       "(Updated on 2025.12.01)', 'Cross-Framework Performance Comparison (H100)' table"},
    specs={"wan-i2v-14b": wan_i2v_14b},
    cells=(_lightx2v("Diffusers", 1, 9.77), _lightx2v("xDiT", 1, 8.93), _lightx2v("FastVideo", 1, 7.35),
           _lightx2v("SGL-Diffusion", 1, 6.13), _lightx2v("LightX2V", 1, 5.18),
           _lightx2v("FastVideo", 8, 2.94), _lightx2v("xDiT", 8, 2.70), _lightx2v("SGL-Diffusion", 8, 1.19),
           _lightx2v("LightX2V", 8, 0.75)),
)
