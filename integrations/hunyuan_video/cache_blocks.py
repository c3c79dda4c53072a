"""Where the step cache finds HunyuanVideo's blocks (diffusers' HunyuanVideoTransformer3DModel).

Every block, dual-stream (transformer_blocks) then single-stream (single_transformer_blocks),
takes (hidden_states, encoder_hidden_states, temb, ...) and returns (hidden_states,
encoder_hidden_states): video and text streams, both carried through a skip. TeaCache's signal
is block 0's norm1 output: LayerNorm of the video stream modulated by temb's shift and scale
(TeaCache4HunyuanVideo's img_norm1 + modulate on double_blocks[0])."""

from __future__ import annotations

import torch

from pipedit.cache.blocks import CacheBlocks


def _arg(args: tuple, kwargs: dict, index: int, name: str):
    return args[index] if len(args) > index else kwargs[name]


def _streams_in(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return _arg(args, kwargs, 0, "hidden_states"), _arg(args, kwargs, 1, "encoder_hidden_states")


def _modulated_input(block, args: tuple, kwargs: dict) -> torch.Tensor:
    modulated, *_ = block.norm1(_arg(args, kwargs, 0, "hidden_states"), emb=_arg(args, kwargs, 2, "temb"))
    return modulated


def cache_blocks(transformer) -> CacheBlocks:
    return CacheBlocks(
        # HunyuanVideo 1.5 has dual-stream blocks only (the same signature and outputs).
        blocks=(*transformer.transformer_blocks, *getattr(transformer, "single_transformer_blocks", ())),
        streams_in=_streams_in,
        streams_out=lambda output: (output[0], output[1]),
        pack=tuple,
        modulated_input=_modulated_input,
    )
