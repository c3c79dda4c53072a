"""Tiny offline Wan checkpoints in the diffusers layout, one per preset (PRESETS):
- t2v: Wan2.1 text-to-video (`WanPipeline`, one transformer);
- a14b: Wan2.2 A14B text-to-video (`WanPipeline` with `transformer_2` and `boundary_ratio`);
- i2v: Wan2.1 image-to-video (`WanImageToVideoPipeline`: a CLIP vision image encoder and its
  CLIPImageProcessor, a transformer taking 36 input channels with image_dim/added_kv_proj_dim);
- i2v-a14b: Wan2.2 I2V A14B (`WanImageToVideoPipeline`, no image encoder, two experts);
- ti2v: Wan2.2 TI2V-5B (`WanPipeline` with expand_timesteps, a 48-channel VAE with 16x spatial
  compression, as the release), which WanImageToVideoPipeline also loads for image-to-video.
Every one has a character-level tokenizer (pad 0, eos 1, as UMT5's), a 2-layer UMT5 encoder,
2-layer WanTransformer3DModels (patch (1, 2, 2)), a narrow AutoencoderKLWan and the released
scheduler form (UniPC multistep, flow prediction, flow_shift 3.0). Weights are random (seeded):
they exercise every code path, they draw nothing. Tests build other sizes through `WanDims`.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from .presets import DEFAULT_PRESET, PRESETS, check_preset

DEMO_VERSION = "wan-demo-v1"
LATENT_CHANNELS = 16
TI2V_LATENT_CHANNELS = 48  # Wan2.2's VAE
MASK_CHANNELS = 4  # image-to-video: the first-frame mask, one channel per frame of a temporal VAE group
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
    image_dim: int = 24  # image-to-video (Wan2.1): the CLIP vision width
    image_size: int = 32  # the CLIP vision input side (patches of 8)


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


def _transformer(dims: WanDims, image_channels: bool = False, image_embeds: bool = False,
                 latent_channels: int = LATENT_CHANNELS):
    """image_channels: the I2V input (latents, mask, first-frame latents); image_embeds: Wan2.1
    I2V's cross-attention to the CLIP image embedding (added K/V projections of the inner width)."""
    from diffusers import WanTransformer3DModel

    in_channels = 2 * latent_channels + MASK_CHANNELS if image_channels else latent_channels
    image = {"image_dim": dims.image_dim, "added_kv_proj_dim": dims.heads * dims.head_dim} if image_embeds else {}
    return WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=dims.heads, attention_head_dim=dims.head_dim,
        in_channels=in_channels, out_channels=latent_channels, text_dim=dims.text_dim, freq_dim=32,
        ffn_dim=dims.ffn_dim, num_layers=dims.layers, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=1e-6, rope_max_seq_len=1024, **image,
    )


def _image_encoder(dims: WanDims):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    config = CLIPVisionConfig(hidden_size=dims.image_dim, intermediate_size=2 * dims.image_dim, projection_dim=16,
                              num_hidden_layers=2, num_attention_heads=2, image_size=dims.image_size, patch_size=8)
    return CLIPVisionModelWithProjection(config)


def _image_processor(dims: WanDims):
    # CLIPImageProcessor's torchvision-free form (what transformers falls back to without torchvision)
    from transformers import CLIPImageProcessorPil

    side = dims.image_size
    return CLIPImageProcessorPil(size={"shortest_edge": side}, crop_size={"height": side, "width": side})


def _vae():
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 2, 2, 2], num_res_blocks=1)


def _ti2v_vae():
    """Wan2.2's VAE form: residual, 2x2 patchified input (12 channels), 16x spatial, 48 latent
    channels; latents_mean/std made up (not 0 and 1, so the normalisation is exercised)."""
    from diffusers import AutoencoderKLWan

    channels = TI2V_LATENT_CHANNELS
    return AutoencoderKLWan(
        base_dim=8, decoder_base_dim=16, z_dim=channels, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
        is_residual=True, in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
        scale_factor_temporal=4, latents_mean=[round(-0.5 + i / channels, 4) for i in range(channels)],
        latents_std=[round(0.8 + i / channels, 4) for i in range(channels)],
    )


def build_pipeline(dims: WanDims = WanDims(), preset: str = DEFAULT_PRESET):
    """An in-memory diffusers WanPipeline / WanImageToVideoPipeline with deterministic tiny weights."""
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline, WanPipeline

    check_preset(preset)
    boundary_ratio, image_to_video, ti2v, _ = PRESETS[preset]
    image_embeds = image_to_video and boundary_ratio is None  # Wan2.2 I2V has no image encoder
    channels = TI2V_LATENT_CHANNELS if ti2v else LATENT_CHANNELS
    tokenizer = build_tokenizer()
    parts = {
        "tokenizer": tokenizer,
        "text_encoder": _seeded(dims.seed + 1, lambda: _text_encoder(len(tokenizer), dims)),
        "transformer": _seeded(dims.seed, lambda: _transformer(dims, image_to_video, image_embeds, channels)),
        "vae": _seeded(dims.seed + 2, _ti2v_vae if ti2v else _vae),
        "scheduler": UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0),
    }
    if ti2v:
        parts["expand_timesteps"] = True
    if boundary_ratio is not None:
        parts.update(boundary_ratio=boundary_ratio,
                     transformer_2=_seeded(dims.seed + 3, lambda: _transformer(dims, image_to_video, False)))
    if not image_to_video:
        return WanPipeline(**parts)
    if image_embeds:
        parts.update(image_encoder=_seeded(dims.seed + 4, lambda: _image_encoder(dims)),
                     image_processor=_image_processor(dims))
    return WanImageToVideoPipeline(**parts)


def write_demo_checkpoint(directory: str | os.PathLike, dims: WanDims = WanDims(), *,
                          preset: str = DEFAULT_PRESET) -> Path:
    """Writes a tiny Wan of `preset` (PRESETS) to `directory` (created; must not hold a checkpoint
    already), atomically."""
    from pipedit.integrations.hunyuan_video.demo_checkpoint import write_pipeline

    check_preset(preset)
    return write_pipeline(directory, lambda: build_pipeline(dims, preset))


def ensure_demo_checkpoint() -> Path:
    """The tiny Wan demo: built once into the cache folder, reused afterwards."""
    from pipedit.local_cache import default_cache_dir, ensure_written

    return ensure_written(default_cache_dir() / DEMO_VERSION, write_demo_checkpoint)


def write_preset(directory: str | os.PathLike, preset: str = DEFAULT_PRESET) -> Path:
    """`pipedit demo-checkpoint --model wan --preset NAME`: the tiny Wan of `preset`."""
    return write_demo_checkpoint(directory, preset=preset)
