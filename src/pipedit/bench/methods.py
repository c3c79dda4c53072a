"""The methods `bench latency` compares, as parallel settings on the same total rank count:

  base     every rank denoises (sequence parallel, synchronous Ulysses all-to-all), then denoise
           rank 0 decodes; no PipeSP, no DeDiVAE, no Aco (optionally the idle module offloaded)
  pipesp   base + PipeSP head-chunked all-to-all (the config's chunk; auto when it says off)
  dedivae  decode ranks beside the denoise ranks (the config's count, else the balance rule)
  aco      dedivae + idle decode ranks computing attention heads (Aco on)
  all      pipesp + dedivae + aco
"""

from __future__ import annotations

from dataclasses import replace

from ..config import ParallelConfig
from ..errors import UserInputError
from ..planner import split_denoise_ranks

METHODS = ("base", "pipesp", "dedivae", "aco", "all")
PIPESP = {"pipesp", "all"}
DECODE_GROUP = {"dedivae", "aco", "all"}
ACO = {"aco", "all"}


def parse_methods(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in METHODS]
    if not names or unknown:
        raise UserInputError(f"--methods: unknown method(s) {', '.join(unknown) or '(none given)'}; "
                             f"allowed: {', '.join(METHODS)} (comma-separated)")
    if len(set(names)) != len(names):
        raise UserInputError(f"--methods lists a method twice: {text}")
    return names


def total_ranks(parallel: ParallelConfig) -> int:
    """The world size the config describes (denoise + decode ranks)."""
    if parallel.ranks is not None:
        return parallel.ranks
    decode = parallel.decode_ranks if isinstance(parallel.decode_ranks, int) else 0
    return parallel.denoise_ranks + decode


def _denoise_split(parallel: ParallelConfig, ranks: int, heads: int) -> tuple[int, int]:
    """The config's ulysses x ring when it fills `ranks`, else as much Ulysses as the heads allow."""
    if parallel.denoise_ranks == ranks:
        return parallel.ulysses, parallel.ring
    return split_denoise_ranks(ranks, heads)


def method_parallel(method: str, parallel: ParallelConfig, ranks: int, heads: int) -> ParallelConfig:
    """The ParallelConfig that runs `method` on `ranks` ranks in all. decode_ranks stays 'auto'
    (the engine applies the balance rule) when the config gives no decode ranks."""
    chunk = parallel.pipesp_chunk if parallel.pipesp_chunk != "off" else "auto"
    chunk = chunk if method in PIPESP else "off"
    aco = "on" if method in ACO else "off"
    if method not in DECODE_GROUP:
        ulysses, ring = _denoise_split(parallel, ranks, heads)
        return replace(parallel, ulysses=ulysses, ring=ring, decode_ranks=0, ranks=None, pipesp_chunk=chunk, aco=aco)
    if ranks < 2:
        raise UserInputError(f"method {method} needs at least 2 ranks (decode ranks beside denoise ranks); "
                             f"the config gives {ranks}: set parallel.ranks in the config or pass --ranks")
    decode = parallel.decode_ranks
    if isinstance(decode, int) and decode > 0:
        if decode >= ranks:
            raise UserInputError(f"decode_ranks {decode} leaves no denoise rank out of {ranks} ranks")
        ulysses, ring = _denoise_split(parallel, ranks - decode, heads)
        if aco == "on" and ring > 1:
            ulysses, ring = ranks - decode, 1  # Aco shares Ulysses heads: no ring
        return replace(parallel, ulysses=ulysses, ring=ring, decode_ranks=decode, ranks=None,
                       pipesp_chunk=chunk, aco=aco)
    # The balance rule splits the ranks (pipedit.runtime.calibration, which also re-checks Aco's ring 1).
    return replace(parallel, ulysses=1, ring=1, decode_ranks="auto", ranks=ranks, pipesp_chunk=chunk, aco=aco)
