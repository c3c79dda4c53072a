"""A tiny offline Wan2.1 text-to-video checkpoint in the diffusers layout (model_index.json
`WanPipeline`): a character-level tokenizer (pad 0, eos 1, as UMT5's), a 2-layer UMT5 encoder,
a 2-layer WanTransformer3DModel (patch (1, 2, 2)), a narrow AutoencoderKLWan and the released
scheduler form (UniPC multistep, flow prediction, flow_shift 3.0). Weights are random (seeded):
it exercises every code path, it draws nothing. Tests build other sizes through `WanDims`.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

DEMO_VERSION = "wan-demo-v1"
PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
MAX_TEXT_TOKENS = 512  # WanPipeline's default max_sequence_length


@dataclass(frozen=True)
class WanDims:
    """The sizes a tiny Wan is built with (the demo's by default)."""

    heads: int = 2
    head_dim: int = 16
    text_dim: int = 32
    ffn_dim: int = 64
    layers: int = 2
    seed: int = 0


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Single characters after a whitespace split (unknown characters -> <unk>); every prompt
    ends in </s>, as UMT5's tokenizer adds it."""
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for char in string.printable.strip():
        vocab.setdefault(char, len(vocab))
    model = models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="", max_input_chars_per_word=200)
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, unk_token=UNK,
                                   model_max_length=MAX_TEXT_TOKENS)


def _seeded(seed: int, build):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _text_encoder(vocab_size: int, dims: WanDims):
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(vocab_size=vocab_size, d_model=dims.text_dim, d_kv=8, d_ff=2 * dims.text_dim,
                        num_layers=2, num_heads=4, relative_attention_num_buckets=8, pad_token_id=0,
                        eos_token_id=1, decoder_start_token_id=0)
    return UMT5EncoderModel(config)


def _transformer(dims: WanDims):
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=dims.heads, attention_head_dim=dims.head_dim, in_channels=16,
        out_channels=16, text_dim=dims.text_dim, freq_dim=32, ffn_dim=dims.ffn_dim, num_layers=dims.layers,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024,
    )


def _vae():
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1)


def build_pipeline(dims: WanDims = WanDims()):
    """An in-memory diffusers WanPipeline with deterministic tiny weights."""
    from diffusers import UniPCMultistepScheduler, WanPipeline

    tokenizer = build_tokenizer()
    return WanPipeline(
        tokenizer=tokenizer,
        text_encoder=_seeded(dims.seed + 1, lambda: _text_encoder(len(tokenizer), dims)),
        transformer=_seeded(dims.seed, lambda: _transformer(dims)),
        vae=_seeded(dims.seed + 2, _vae),
        scheduler=UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0),
    )


def write_demo_checkpoint(directory: str | os.PathLike, dims: WanDims = WanDims()) -> Path:
    """Writes a tiny Wan to `directory` (created; must not hold a checkpoint already), atomically."""
    from pipedit.integrations.hunyuan_video.demo_checkpoint import write_pipeline

    return write_pipeline(directory, lambda: build_pipeline(dims))


def ensure_demo_checkpoint() -> Path:
    """The tiny Wan demo: built once into the cache folder, reused afterwards."""
    from pipedit.integrations.hunyuan_video.demo_checkpoint import (
        default_cache_dir,
        ensure_written,
    )

    return ensure_written(default_cache_dir() / DEMO_VERSION, write_demo_checkpoint)
