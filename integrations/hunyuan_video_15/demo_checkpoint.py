"""Tiny offline HunyuanVideo 1.5 checkpoints in the diffusers layout, one per preset (presets.py):
- t2v: `HunyuanVideo15Pipeline` (Qwen2.5-VL text model and its tokenizer, ByT5 (a T5 encoder) for
  the quoted text, the transformer, the 16x-spatial VAE, flow-match Euler, the CFG guider);
- i2v: `HunyuanVideo15ImageToVideoPipeline`, the same plus a SigLIP vision encoder and its image
  processor.
The architecture is the release's, only narrow; weights are random (seeded): the same call writes
the same files. Tests build other sizes through `HunyuanVideo15Dims`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipedit.integrations.hunyuan_video.demo_checkpoint import _seeded  # a build under a fixed seed

from .demo_tokenizers import build_byt5_tokenizer, build_qwen_tokenizer
from .presets import DEFAULT_PRESET, check_preset

DEMO_VERSION = "hunyuan-video-15-demo-v1"
BYT5_VOCAB = 384  # ByT5Tokenizer: 3 specials + 256 bytes + 125 extra ids


@dataclass(frozen=True)
class HunyuanVideo15Dims:
    """The sizes a tiny HunyuanVideo 1.5 is built with (the demo's by default)."""

    heads: int = 2
    head_dim: int = 16
    rope_axes: tuple[int, int, int] = (4, 6, 6)  # sums to head_dim
    layers: int = 2
    latent_channels: int = 8
    text_dim: int = 32  # Qwen2.5-VL hidden size
    text_layers: int = 3  # the pipeline reads the hidden state 3rd from the end
    byt5_dim: int = 24
    image_dim: int = 24  # SigLIP hidden size (image-to-video)
    target_size: int = 64  # image-to-video: the image's size bucket (pixels)
    shift: float = 5.0
    guidance_scale: float = 6.0
    seed: int = 0


def _text_encoder(vocab_size: int, dims: HunyuanVideo15Dims):
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    heads = 2
    half_head = dims.text_dim // heads // 2
    section = [half_head - 2 * (half_head // 3), half_head // 3, half_head // 3]  # sums to head_dim / 2
    config = Qwen2_5_VLTextConfig(
        vocab_size=vocab_size, hidden_size=dims.text_dim, intermediate_size=2 * dims.text_dim,
        num_hidden_layers=dims.text_layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=2048, pad_token_id=vocab_size - 3, bos_token_id=None, eos_token_id=vocab_size - 1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
    )
    return Qwen2_5_VLTextModel(config)


def _byt5_encoder(dims: HunyuanVideo15Dims):
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=BYT5_VOCAB, d_model=dims.byt5_dim, d_kv=8, d_ff=2 * dims.byt5_dim, num_layers=1,
                      num_heads=2, relative_attention_num_buckets=8, feed_forward_proj="gated-gelu")
    return T5EncoderModel(config)


def _transformer(dims: HunyuanVideo15Dims, task: str):
    from diffusers import HunyuanVideo15Transformer3DModel

    return HunyuanVideo15Transformer3DModel(
        in_channels=2 * dims.latent_channels + 1, out_channels=dims.latent_channels, num_attention_heads=dims.heads,
        attention_head_dim=dims.head_dim, num_layers=dims.layers, num_refiner_layers=1, patch_size=1,
        patch_size_t=1, text_embed_dim=dims.text_dim, text_embed_2_dim=dims.byt5_dim, image_embed_dim=dims.image_dim,
        rope_axes_dim=dims.rope_axes, target_size=dims.target_size, task_type=task,
    )


def _vae(dims: HunyuanVideo15Dims):
    from diffusers import AutoencoderKLHunyuanVideo15

    # 16x spatial needs five levels; the deepest must be at least twice the latent channels.
    top = 2 * dims.latent_channels
    return AutoencoderKLHunyuanVideo15(latent_channels=dims.latent_channels, layers_per_block=1,
                                       block_out_channels=(8, 8, top, top, top))


def _image_encoder(dims: HunyuanVideo15Dims):
    from transformers import SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(hidden_size=dims.image_dim, intermediate_size=2 * dims.image_dim,
                                num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
    return SiglipVisionModel(config)


def _image_processor():
    # SiglipImageProcessor's torchvision-free form (what transformers falls back to without torchvision)
    from transformers import SiglipImageProcessorPil

    return SiglipImageProcessorPil(size={"height": 32, "width": 32})


def build_pipeline(dims: HunyuanVideo15Dims = HunyuanVideo15Dims(), preset: str = DEFAULT_PRESET):
    """An in-memory diffusers HunyuanVideo 1.5 pipeline of `preset` with deterministic tiny weights."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline
    from diffusers.guiders import ClassifierFreeGuidance

    check_preset(preset)
    tokenizer = build_qwen_tokenizer(max_length=4096)
    parts = {
        "tokenizer": tokenizer,
        "text_encoder": _seeded(dims.seed + 1, lambda: _text_encoder(len(tokenizer), dims)),
        "tokenizer_2": build_byt5_tokenizer(),
        "text_encoder_2": _seeded(dims.seed + 2, lambda: _byt5_encoder(dims)),
        "transformer": _seeded(dims.seed, lambda: _transformer(dims, preset)),
        "vae": _seeded(dims.seed + 3, lambda: _vae(dims)),
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=dims.shift),
        "guider": ClassifierFreeGuidance(guidance_scale=dims.guidance_scale),
    }
    if preset == "t2v":
        return HunyuanVideo15Pipeline(**parts)
    parts.update(image_encoder=_seeded(dims.seed + 4, lambda: _image_encoder(dims)),
                 feature_extractor=_image_processor())
    return HunyuanVideo15ImageToVideoPipeline(**parts)


def write_demo_checkpoint(directory: str | os.PathLike, dims: HunyuanVideo15Dims = HunyuanVideo15Dims(), *,
                          preset: str = DEFAULT_PRESET) -> Path:
    """Writes a tiny HunyuanVideo 1.5 of `preset` to `directory` (created; must not hold a
    checkpoint already), atomically."""
    from pipedit.integrations.hunyuan_video.demo_checkpoint import write_pipeline

    check_preset(preset)
    return write_pipeline(directory, lambda: build_pipeline(dims, preset))


def ensure_demo_checkpoint() -> Path:
    """The tiny text-to-video demo: built once into the cache folder, reused afterwards."""
    from pipedit.local_cache import default_cache_dir, ensure_written

    return ensure_written(default_cache_dir() / DEMO_VERSION, write_demo_checkpoint)


def write_preset(directory: str | os.PathLike, preset: str = DEFAULT_PRESET) -> Path:
    """`pipedit demo-checkpoint --model hunyuan-video-1.5 --preset NAME`: the tiny model of `preset`."""
    return write_demo_checkpoint(directory, preset=preset)
