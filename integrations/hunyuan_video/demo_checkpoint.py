"""A complete tiny HunyuanVideo pipeline in the diffusers on-disk layout, built offline.

The same call writes the same weights (every component is initialised under a fixed seed), so
the demo model is a stable reference for tests and for `make run`. The architecture is the real
one, only small: any code that loads this checkpoint loads the public release the same way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# The prompt template and its crop are part of the released pipeline's defaults.
from diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video import DEFAULT_PROMPT_TEMPLATE

from pipedit.local_cache import default_cache_dir, ensure_written

from .demo_tokenizers import build_clip_tokenizer, build_llama_tokenizer

DEMO_VERSION = "hunyuan-demo-v1"
LLAMA_MAX_TOKENS = 256
CLIP_MAX_TOKENS = 77


def _seeded(seed: int, build):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _transformer():
    from diffusers import HunyuanVideoTransformer3DModel

    return HunyuanVideoTransformer3DModel(
        in_channels=16, out_channels=16, num_attention_heads=4, attention_head_dim=16,
        num_layers=2, num_single_layers=2, num_refiner_layers=1, patch_size=2, patch_size_t=1,
        text_embed_dim=32, pooled_projection_dim=16, rope_axes_dim=(4, 6, 6),
    )


def _vae():
    from diffusers import AutoencoderKLHunyuanVideo

    return AutoencoderKLHunyuanVideo(
        latent_channels=16, block_out_channels=(8, 8, 8, 8), layers_per_block=1, norm_num_groups=4,
    )


def _llama(vocab_size: int):
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512, pad_token_id=0,
    )
    return LlamaModel(config)


def _clip(vocab_size: int, eos_token_id: int):
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=CLIP_MAX_TOKENS, projection_dim=16,
        pad_token_id=0, bos_token_id=2, eos_token_id=eos_token_id,
    )
    return CLIPTextModel(config)


def demo_text_components() -> dict:
    """The demo tokenizers and small text encoders, keyed by pipeline component name. Other
    presets reuse them: the transformer's text widths must match these encoders' hidden sizes."""
    template = DEFAULT_PROMPT_TEMPLATE
    prefix = template["template"].split("{}")[0]
    crop_start = template["crop_start"]
    tokenizer = build_llama_tokenizer(prefix, crop_start, LLAMA_MAX_TOKENS + crop_start)
    tokenizer_2 = build_clip_tokenizer(CLIP_MAX_TOKENS)
    return {
        "text_encoder": _seeded(2, lambda: _llama(len(tokenizer))),
        "text_encoder_2": _seeded(3, lambda: _clip(len(tokenizer_2), tokenizer_2.eos_token_id)),
        "tokenizer": tokenizer,
        "tokenizer_2": tokenizer_2,
    }


def build_demo_pipeline():
    """Returns an in-memory diffusers HunyuanVideoPipeline with deterministic tiny weights."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline

    return HunyuanVideoPipeline(
        transformer=_seeded(0, _transformer),
        vae=_seeded(1, _vae),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        **demo_text_components(),
    )


def write_demo_checkpoint(directory: str | os.PathLike) -> Path:
    """Writes the demo pipeline to `directory` (created; must not hold a checkpoint already)."""
    return write_pipeline(directory, build_demo_pipeline)


def write_pipeline(directory: str | os.PathLike, build: Callable[[], Any]) -> Path:
    """Writes the pipeline `build()` returns to `directory` (created; must not hold a checkpoint
    already). The files appear atomically: a crash never leaves a half-written checkpoint behind."""
    target = Path(directory)
    if (target / "model_index.json").exists():
        raise FileExistsError(f"{target} already holds a checkpoint (model_index.json); choose an empty directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=target.parent))
    try:
        build().save_pretrained(staging, safe_serialization=True)
        if target.exists():
            for entry in staging.iterdir():
                entry.rename(target / entry.name)
            staging.rmdir()
        else:
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure_demo_checkpoint() -> Path:
    """The embedded default model: built once into the cache folder, reused afterwards."""
    return ensure_written(default_cache_dir() / DEMO_VERSION, write_demo_checkpoint)
