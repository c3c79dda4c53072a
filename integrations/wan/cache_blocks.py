"""Where the step cache finds Wan's blocks (diffusers' WanTransformer3DModel).

Each WanTransformerBlock takes (hidden_states, encoder_hidden_states, temb, rotary_emb) and
returns hidden_states: the video stream is the only stream the blocks change (the text and image
context is read, never updated). With CFG batched on one rank, the stream holds both branches:
the cache's sums span both, as the two CFG-parallel groups' sums do together. Under sequence
parallelism the first block's input is cut to the rank's tokens by a pre-hook, before the cache
sees it. No TeaCache signal: TeaCache's Wan2.1 coefficients rescale the timestep embedding, not
a modulated block input (see pipedit.cache.policy)."""

from __future__ import annotations

from pipedit.cache.blocks import CacheBlocks


def cache_blocks(transformer) -> CacheBlocks:
    return CacheBlocks.single_stream(transformer.blocks, "hidden_states")
