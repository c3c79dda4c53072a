"""Automatic choices the paper leaves to hand-tuning: here, the decode-group size.

DeDiVAE balance rule (PipeDiT §2): with single-rank per-request times T_denoise and T_decode,
N_decode ~= T_decode / (T_decode + T_denoise) * N. The times are measured by
pipedit.runtime.calibration and handed in; this module computes, it never runs a model.
"""

from __future__ import annotations


def balance_decode_ranks(t_denoise: float, t_decode: float, ranks: int) -> int:
    """The balance rule, rounded, keeping at least one rank in each group."""
    share = t_decode / (t_decode + t_denoise)
    return min(ranks - 1, max(1, round(share * ranks)))


def split_denoise_ranks(ranks: int, heads: int) -> tuple[int, int]:
    """(ulysses, ring) for `ranks` denoise ranks: as much Ulysses as the heads allow."""
    ulysses = max(u for u in range(1, min(ranks, heads) + 1) if ranks % u == 0)
    return ulysses, ranks // ulysses
