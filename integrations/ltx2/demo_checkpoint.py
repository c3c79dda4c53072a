"""Tiny offline LTX-2 checkpoints in the diffusers layout, one per preset (presets.PRESETS): the
joint audio-video transformer, the video VAE, the audio VAE and its vocoder, a Gemma 3 text
encoder (with its small vision tower: the class the released repos hold) and its tokenizer, the
text connectors, and the released scheduler form. LTX-2 ("2.0") and LTX-2.3 ("2.3") differ where
diffusers' configs for the two releases differ: 2.3 has gated attention and prompt modulation in
the transformer (no caption projection), per-modality text projections and gated attention in
the connectors, and a vocoder with bandwidth extension (16 kHz -> 48 kHz); 2.0's vocoder writes
24 kHz.

Weights are random (seeded): they exercise every code path, they draw nothing. The demo sizes
keep a two-step run on a CPU within a second or two while every path stays non-trivial: several
latent frames of several tokens each (9 frames at 32x64 -> 3 x 4 x 8 = 96 video tokens), an even
number of attention heads everywhere, audio of several latent frames, connector registers that
divide both the tokenizer's small max length and the pipeline's default of 1024. Tests build
other sizes through `LTX2Dims` (TEST_DIMS is one unlike the demo's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .demo_tokenizer import build_gemma_tokenizer, image_token_ids
from .presets import DEFAULT_PRESET, PRESETS, check_preset

DEMO_VERSION = "ltx2-demo-v1"
VIDEO_SPATIAL_COMPRESSION = 8  # the tiny video VAE: patch 2, then spatial x2 and spatio-temporal x2
VIDEO_TEMPORAL_COMPRESSION = 4  # temporal x2 and spatio-temporal x2
AUDIO_SAMPLE_RATE, MEL_HOP_LENGTH = 16000, 160  # the released audio VAE's mel front end (100 mel frames a second)


@dataclass(frozen=True)
class LTX2Dims:
    """The sizes a tiny LTX-2 is built with (the demo's by default)."""

    heads: int = 2  # video attention heads (the audio-to-video cross attention uses as many)
    head_dim: int = 16
    audio_heads: int = 2
    audio_head_dim: int = 8
    layers: int = 2  # transformer blocks
    text_dim: int = 32  # Gemma's hidden size (the connectors' caption channels)
    text_layers: int = 2  # Gemma's decoder layers: the connectors take text_layers + 1 hidden states
    text_heads: int = 2  # Gemma's query heads (one key/value head, as Gemma 3 groups them)
    connector_layers: int = 1
    registers: int = 8  # learnable registers of each connector: must divide the text length
    max_text_tokens: int = 32  # the tokenizer's model_max_length
    latent_channels: int = 8  # video VAE latent channels (the transformer's in_channels)
    audio_latent_channels: int = 2
    mel_bins: int = 16  # the audio VAE compresses them 4x: audio tokens carry audio_latent_channels * mel_bins / 4
    vocoder_channels: int = 32
    seed: int = 0


# Every width differs from the demo's; heads stay even (two-rank head sharding).
TEST_DIMS = LTX2Dims(heads=4, head_dim=12, audio_heads=4, audio_head_dim=6, layers=3, text_dim=48, text_layers=3,
                     text_heads=4, connector_layers=2, registers=16, max_text_tokens=64, latent_channels=4,
                     audio_latent_channels=4, mel_bins=8, vocoder_channels=24, seed=7)


def _seeded(seed: int, build):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _made_up_statistics(module, channels: int) -> None:
    """Latent mean/std not 0 and 1, so the pipelines' (de)normalisation is exercised."""
    module.latents_mean.copy_(torch.tensor([round(-0.2 + 0.4 * i / channels, 4) for i in range(channels)]))
    module.latents_std.copy_(torch.tensor([round(0.8 + 0.4 * i / channels, 4) for i in range(channels)]))


def _audio_token_width(dims: LTX2Dims) -> int:
    return dims.audio_latent_channels * dims.mel_bins // 4


def _text_encoder(vocab_size: int, dims: LTX2Dims):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=dims.text_dim, intermediate_size=2 * dims.text_dim,
        num_hidden_layers=dims.text_layers, num_attention_heads=dims.text_heads, num_key_value_heads=1,
        head_dim=dims.text_dim // dims.text_heads, query_pre_attn_scalar=dims.text_dim // dims.text_heads,
        max_position_embeddings=2048, sliding_window=16,  # shorter than the text: both attention kinds matter
        layer_types=["sliding_attention"] * (dims.text_layers - 1) + ["full_attention"],
    )
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=16, patch_size=4)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, **image_token_ids())
    return Gemma3ForConditionalGeneration(config)


def _connectors(dims: LTX2Dims, version: str):
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    if version == "2.0":  # one projection to the caption width: the connectors run at Gemma's width
        widths = {"video": (2, dims.text_dim // 2), "audio": (2, dims.text_dim // 2)}
        variant = {"per_modality_projections": False, "proj_bias": False}
    else:  # per-modality projections straight to the transformer's widths
        widths = {"video": (dims.heads, dims.head_dim), "audio": (dims.audio_heads, dims.audio_head_dim)}
        variant = {"per_modality_projections": True, "video_hidden_dim": dims.heads * dims.head_dim,
                   "audio_hidden_dim": dims.audio_heads * dims.audio_head_dim, "proj_bias": True}
    gated = version == "2.3"
    per_stream = {}
    for stream, (heads, head_dim) in widths.items():
        per_stream.update({f"{stream}_connector_num_attention_heads": heads,
                           f"{stream}_connector_attention_head_dim": head_dim,
                           f"{stream}_connector_num_layers": dims.connector_layers,
                           f"{stream}_connector_num_learnable_registers": dims.registers,
                           f"{stream}_gated_attn": gated})
    return LTX2TextConnectors(caption_channels=dims.text_dim, text_proj_in_factor=dims.text_layers + 1,
                              connector_rope_base_seq_len=1024, rope_type="split", **per_stream, **variant)


def _transformer(dims: LTX2Dims, version: str):
    from diffusers import LTX2VideoTransformer3DModel

    v23 = version == "2.3"
    inner, audio_inner = dims.heads * dims.head_dim, dims.audio_heads * dims.audio_head_dim
    return LTX2VideoTransformer3DModel(
        in_channels=dims.latent_channels, out_channels=dims.latent_channels, patch_size=1, patch_size_t=1,
        num_attention_heads=dims.heads, attention_head_dim=dims.head_dim, cross_attention_dim=inner,
        vae_scale_factors=(VIDEO_TEMPORAL_COMPRESSION, VIDEO_SPATIAL_COMPRESSION, VIDEO_SPATIAL_COMPRESSION),
        audio_in_channels=_audio_token_width(dims), audio_out_channels=_audio_token_width(dims),
        audio_num_attention_heads=dims.audio_heads, audio_attention_head_dim=dims.audio_head_dim,
        audio_cross_attention_dim=audio_inner, audio_sampling_rate=AUDIO_SAMPLE_RATE,
        audio_hop_length=MEL_HOP_LENGTH, num_layers=dims.layers, caption_channels=dims.text_dim,
        rope_type="split", gated_attn=v23, cross_attn_mod=v23, audio_gated_attn=v23, audio_cross_attn_mod=v23,
        use_prompt_embeddings=not v23, perturbed_attn=v23,
    )


def _video_vae(dims: LTX2Dims):
    """The released block kinds, fewer and narrower: patch 2, then spatial, temporal and
    spatio-temporal downsampling (8x spatial, 4x temporal); the decoder mirrors it."""
    from diffusers import AutoencoderKLLTX2Video

    vae = AutoencoderKLLTX2Video(
        latent_channels=dims.latent_channels, block_out_channels=(8, 16, 16),
        down_block_types=("LTX2VideoDownBlock3D",) * 3, decoder_block_out_channels=(8, 16, 16),
        layers_per_block=(1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, True), decoder_spatio_temporal_scaling=(True, True, True),
        decoder_inject_noise=(False,) * 4, downsample_type=("spatial", "temporal", "spatiotemporal"),
        upsample_type=("spatiotemporal", "temporal", "spatial"), upsample_residual=(False,) * 3,
        upsample_factor=(1, 1, 1), timestep_conditioning=False, patch_size=2, patch_size_t=1,
        encoder_causal=True, decoder_causal=False, spatial_compression_ratio=VIDEO_SPATIAL_COMPRESSION,
        temporal_compression_ratio=VIDEO_TEMPORAL_COMPRESSION,
    )
    _made_up_statistics(vae, dims.latent_channels)
    return vae


def _audio_vae(dims: LTX2Dims):
    """The released form (mel front end at 16 kHz, 4x down in time and mel bins), narrow. Its
    latent statistics have one entry per packed audio channel (latent channels x latent mel bins)."""
    from diffusers import AutoencoderKLLTX2Audio

    width = _audio_token_width(dims)
    vae = AutoencoderKLLTX2Audio(
        base_channels=width, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=1, attn_resolutions=None,
        in_channels=2, resolution=32, latent_channels=dims.audio_latent_channels, norm_type="pixel",
        causality_axis="height", mid_block_add_attention=False, sample_rate=AUDIO_SAMPLE_RATE,
        mel_hop_length=MEL_HOP_LENGTH, is_causal=True, mel_bins=dims.mel_bins, double_z=True,
    )
    _made_up_statistics(vae, width)
    return vae


def _vocoder(dims: LTX2Dims, version: str):
    """Mel frames (100 a second) to stereo waveforms. LTX-2's upsamples 240x to 24 kHz; LTX-2.3's
    upsamples 160x to 16 kHz, then its bandwidth extension re-analyses that (hop 80) and
    upsamples 240x to 48 kHz."""
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

    mel_width = 2 * dims.mel_bins  # stereo mel spectrograms, channels x bins
    # Each transposed convolution's kernel exceeds its stride by an even number, so it upsamples exactly
    # (the bandwidth extension adds its output to a resampled copy of its input: lengths must agree).
    common = {"resnet_kernel_sizes": [3], "resnet_dilations": [[1, 3]], "leaky_relu_negative_slope": 0.1}
    if version == "2.0":
        return LTX2Vocoder(in_channels=mel_width, hidden_channels=dims.vocoder_channels, out_channels=2,
                           upsample_kernel_sizes=[12, 11, 16], upsample_factors=[6, 5, 8],
                           output_sampling_rate=24000, **common)
    bwe_mel_bins = 16
    return LTX2VocoderWithBWE(
        in_channels=mel_width, hidden_channels=dims.vocoder_channels, out_channels=2,
        upsample_kernel_sizes=[11, 8, 16], upsample_factors=[5, 4, 8], act_fn="snakebeta", antialias=True,
        final_act_fn=None, final_bias=False, bwe_in_channels=2 * bwe_mel_bins, bwe_hidden_channels=16,
        bwe_out_channels=2, bwe_upsample_kernel_sizes=[12, 11, 16], bwe_upsample_factors=[6, 5, 8],
        bwe_resnet_kernel_sizes=[3], bwe_resnet_dilations=[[1, 3]], bwe_act_fn="snakebeta", bwe_antialias=True,
        bwe_final_act_fn=None, bwe_final_bias=False, filter_length=128, hop_length=80, window_length=128,
        num_mel_channels=bwe_mel_bins, input_sampling_rate=AUDIO_SAMPLE_RATE, output_sampling_rate=48000, **common,
    )


def _scheduler(distilled: bool):
    """The released form: flow-match Euler with a shift that grows with the video token count
    (0.95 at 1024 tokens to 2.05 at 4096) and a terminal shift; the distilled release's has neither."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    shift = {"base_shift": 0.95, "max_shift": 2.05, "base_image_seq_len": 1024, "max_image_seq_len": 4096}
    if distilled:
        return FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=False, shift_terminal=None, **shift)
    return FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, shift_terminal=0.1, **shift)


def build_pipeline(dims: LTX2Dims = LTX2Dims(), preset: str = DEFAULT_PRESET):
    """An in-memory diffusers LTX2Pipeline / LTX2ImageToVideoPipeline with deterministic tiny weights."""
    from diffusers import LTX2ImageToVideoPipeline, LTX2Pipeline

    check_preset(preset)
    version, image_to_video, distilled, _ = PRESETS[preset]
    tokenizer = build_gemma_tokenizer(dims.max_text_tokens)
    parts = {
        "tokenizer": tokenizer,
        "text_encoder": _seeded(dims.seed + 1, lambda: _text_encoder(len(tokenizer), dims)),
        "connectors": _seeded(dims.seed + 2, lambda: _connectors(dims, version)),
        "transformer": _seeded(dims.seed, lambda: _transformer(dims, version)),
        "vae": _seeded(dims.seed + 3, lambda: _video_vae(dims)),
        "audio_vae": _seeded(dims.seed + 4, lambda: _audio_vae(dims)),
        "vocoder": _seeded(dims.seed + 5, lambda: _vocoder(dims, version)),
        "scheduler": _scheduler(distilled),
    }
    return (LTX2ImageToVideoPipeline if image_to_video else LTX2Pipeline)(**parts)


def write_demo_checkpoint(directory: str | os.PathLike, dims: LTX2Dims = LTX2Dims(), *,
                          preset: str = DEFAULT_PRESET) -> Path:
    """Writes a tiny LTX-2 of `preset` (presets.PRESETS) to `directory` (created; must not hold a
    checkpoint already: FileExistsError), atomically."""
    from pipedit.integrations.hunyuan_video.demo_checkpoint import write_pipeline

    check_preset(preset)
    return write_pipeline(directory, lambda: build_pipeline(dims, preset))


def ensure_demo_checkpoint() -> Path:
    """The tiny LTX-2 demo: built once into the cache folder, reused afterwards."""
    from pipedit.local_cache import default_cache_dir, ensure_written

    return ensure_written(default_cache_dir() / DEMO_VERSION, write_demo_checkpoint)


def write_preset(directory: str | os.PathLike, preset: str = DEFAULT_PRESET) -> Path:
    """`pipedit demo-checkpoint --model ltx-2 --preset NAME`: the tiny LTX-2 of `preset`."""
    return write_demo_checkpoint(directory, preset=preset)
