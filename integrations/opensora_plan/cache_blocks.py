"""Where the step cache finds OpenSoraPlan v1.3's blocks (pipedit's own transformer).

Each TransformerBlock takes (x, t6, text, video_bias, text_bias, rotary) and returns x: the
video stream is the only stream the blocks change (the projected text is read, never updated).
With CFG batched on one rank, x holds both branches: the cache's sums span both, as the two
CFG-parallel groups' sums do together. No TeaCache signal: no coefficients exist for v1.3
(see pipedit.cache.policy)."""

from __future__ import annotations

from pipedit.cache.blocks import CacheBlocks


def cache_blocks(transformer) -> CacheBlocks:
    return CacheBlocks.single_stream(transformer.transformer_blocks, "x")
