"""What a model tells the step cache about its transformer (each integration builds one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Streams = tuple[torch.Tensor, ...]  # (video hidden states, [text hidden states]) of one block


@dataclass(frozen=True)
class CacheBlocks:
    """blocks: every transformer block, in forward order (block 0 is the head, the rest the
    tail). streams_in(args, kwargs): the streams a block receives; streams_out(output): the
    streams it returns; pack(streams): the return form of a block (what the next block and the
    model read). Stream 0 is the video stream (the signal); every stream is carried through a
    skip. modulated_input(block0, args, kwargs): TeaCache's signal, block 0's timestep-modulated
    normalized video input; None where the model has no TeaCache coefficients."""

    blocks: tuple[torch.nn.Module, ...]
    streams_in: Callable[[tuple, dict], Streams]
    streams_out: Callable[[Any], Streams]
    pack: Callable[[Streams], Any]
    modulated_input: Callable[[torch.nn.Module, tuple, dict], torch.Tensor] | None = None

    @classmethod
    def single_stream(cls, blocks, keyword: str) -> CacheBlocks:
        """Blocks that take the video stream first (positionally or as `keyword`) and return it
        alone: the only stream they change (OpenSoraPlan's, Wan's)."""
        return cls(
            blocks=tuple(blocks),
            streams_in=lambda args, kwargs: (args[0] if args else kwargs[keyword],),
            streams_out=lambda output: (output,),
            pack=lambda streams: streams[0],
        )
