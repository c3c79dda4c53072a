"""One memory budget for every decode rank's decode decisions (HunyuanVideo's VAE tiling).

Decode ranks hold different parts: in hunyuan-8gpu.yaml rank 6 holds the text encoder beside the
VAE and rank 7 the VAE alone, so at 720p rank 6's free memory says "tile" and rank 7's "do not":
a request's frames would depend on which rank decoded it (tiled and untiled decodes differ in the
last bits). Once a rank group is up (every rank loaded, nothing running), the engine asks each
decode rank for its free memory and fixes the tightest figure on all of them; the dry run does
the same with its fake ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def tightest(free_bytes: Iterable[int | None]) -> int | None:
    """The smallest figure; None where no rank's decode depends on memory."""
    known = [free for free in free_bytes if free is not None]
    return min(known) if known else None


def fix_decode_budget(decode_ranks: tuple[int, ...], call_rank: Callable[..., object]) -> int | None:
    """Asks every decode rank its free memory and fixes the tightest on each (call_rank(rank,
    method, *args)); returns it. Nothing to fix with fewer than two decode ranks."""
    if len(decode_ranks) < 2:
        return None
    budget = tightest(call_rank(rank, "decode_free_bytes") for rank in decode_ranks)
    if budget is not None:
        for rank in decode_ranks:
            call_rank(rank, "fix_decode_budget", budget)
    return budget
