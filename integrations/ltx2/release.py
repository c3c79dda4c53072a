"""LTX-2 as released in the diffusers layout: the configs of each component, for the planner's specs
and the dry run's released folders. Parameter counts come from the modules built on the meta device
from these configs (never typed in); the tests hold them against the released files' sizes.

Sources. Every dim below is diffusers' own conversion of Lightricks' checkpoints
(scripts/convert_ltx2_to_diffusers.py of the diffusers repository, versions "2.0" and "2.3":
get_ltx2_transformer_config, get_ltx2_connectors_config, get_ltx2_video_vae_config,
get_ltx2_audio_vae_config, get_ltx2_vocoder_config), read with the pinned diffusers 0.42.1's
classes, which take every key. The Gemma 3 12B text encoder's dims are google/gemma-3-12b-it's
config.json (text: 48 layers of 3840, 16 query and 8 key-value heads of 256, MLP 15360, vocabulary
262208; vision: SigLIP 27 x 1152 at 896 px); the scheduler's figures are the conversion's
(dynamic shift 0.95 to 2.05 between 1024 and 4096 tokens, terminal 0.1; the distilled checkpoints
switch the dynamic shift and the terminal off).

Releases:
  ltx-2            Lightricks/LTX-2 (dev): the 19B joint audio-video DiT (48 blocks; video 32 x 128,
                   audio 32 x 64), two-layer connectors over 1024 Gemma tokens, the 32x/8x video VAE,
                   the audio VAE (16 kHz mel, 4x temporal) and a 24 kHz vocoder
  ltx-2-distilled  rootonchair/LTX-2-19b-distilled: the same dims, the distilled weights and scheduler
  ltx-2.3          diffusers/LTX-2.3-Diffusers: gated attention, prompt modulation, eight-layer
                   connectors with per-modality projections (the "22B": 19.0B DiT + 3.2B connectors),
                   the 2.3 video VAE and a 48 kHz vocoder with bandwidth extension
"""

from __future__ import annotations

from functools import lru_cache

RELEASES = ("ltx-2", "ltx-2-distilled", "ltx-2.3")
LABELS = {"ltx-2": "LTX-2 19B (dev)", "ltx-2-distilled": "LTX-2 19B distilled", "ltx-2.3": "LTX-2.3 22B (dev)"}
DISTILLED = {"ltx-2-distilled"}
TEXT_TOKENS = 1024  # LTX2Pipeline's max_sequence_length: Gemma, the connectors and the DiT see all 1024
FRAME_RATE = 24.0  # LTX2Pipeline's default frame_rate: the audio's length follows frames / fps

TRANSFORMER_20 = {
    "_class_name": "LTX2VideoTransformer3DModel", "in_channels": 128, "out_channels": 128, "patch_size": 1,
    "patch_size_t": 1, "num_attention_heads": 32, "attention_head_dim": 128, "cross_attention_dim": 4096,
    "vae_scale_factors": [8, 32, 32], "pos_embed_max_pos": 20, "base_height": 2048, "base_width": 2048,
    "gated_attn": False, "cross_attn_mod": False, "audio_in_channels": 128, "audio_out_channels": 128,
    "audio_patch_size": 1, "audio_patch_size_t": 1, "audio_num_attention_heads": 32, "audio_attention_head_dim": 64,
    "audio_cross_attention_dim": 2048, "audio_scale_factor": 4, "audio_pos_embed_max_pos": 20,
    "audio_sampling_rate": 16000, "audio_hop_length": 160, "audio_gated_attn": False, "audio_cross_attn_mod": False,
    "num_layers": 48, "activation_fn": "gelu-approximate", "qk_norm": "rms_norm_across_heads",
    "norm_elementwise_affine": False, "norm_eps": 1e-06, "caption_channels": 3840, "attention_bias": True,
    "attention_out_bias": True, "rope_theta": 10000.0, "rope_double_precision": True, "causal_offset": 1,
    "timestep_scale_multiplier": 1000, "cross_attn_timestep_scale_multiplier": 1000, "rope_type": "split",
    "use_prompt_embeddings": True, "perturbed_attn": False,
}
TRANSFORMER_23 = {**TRANSFORMER_20, "gated_attn": True, "cross_attn_mod": True, "audio_gated_attn": True,
                  "audio_cross_attn_mod": True, "use_prompt_embeddings": False, "perturbed_attn": True}
CONNECTORS_20 = {
    "_class_name": "LTX2TextConnectors", "caption_channels": 3840, "text_proj_in_factor": 49,
    "video_connector_num_attention_heads": 30, "video_connector_attention_head_dim": 128,
    "video_connector_num_layers": 2, "video_connector_num_learnable_registers": 128, "video_gated_attn": False,
    "audio_connector_num_attention_heads": 30, "audio_connector_attention_head_dim": 128,
    "audio_connector_num_layers": 2, "audio_connector_num_learnable_registers": 128, "audio_gated_attn": False,
    "connector_rope_base_seq_len": 4096, "rope_theta": 10000.0, "rope_double_precision": True,
    "causal_temporal_positioning": False, "rope_type": "split", "per_modality_projections": False,
    "proj_bias": False,
}
CONNECTORS_23 = {**CONNECTORS_20, "video_connector_num_attention_heads": 32, "video_connector_num_layers": 8,
                 "video_gated_attn": True, "audio_connector_num_attention_heads": 32,
                 "audio_connector_attention_head_dim": 64, "audio_connector_num_layers": 8, "audio_gated_attn": True,
                 "per_modality_projections": True, "video_hidden_dim": 4096, "audio_hidden_dim": 2048,
                 "proj_bias": True}
VAE_20 = {
    "_class_name": "AutoencoderKLLTX2Video", "in_channels": 3, "out_channels": 3, "latent_channels": 128,
    "block_out_channels": [256, 512, 1024, 2048], "down_block_types": ["LTX2VideoDownBlock3D"] * 4,
    "decoder_block_out_channels": [256, 512, 1024], "layers_per_block": [4, 6, 6, 2, 2],
    "decoder_layers_per_block": [5, 5, 5, 5], "spatio_temporal_scaling": [True] * 4,
    "decoder_spatio_temporal_scaling": [True] * 3, "decoder_inject_noise": [False] * 4,
    "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"],
    "upsample_type": ["spatiotemporal"] * 3, "upsample_residual": [True] * 3, "upsample_factor": [2, 2, 2],
    "timestep_conditioning": False, "patch_size": 4, "patch_size_t": 1, "resnet_norm_eps": 1e-06,
    "encoder_causal": True, "decoder_causal": False, "encoder_spatial_padding_mode": "zeros",
    "decoder_spatial_padding_mode": "reflect", "spatial_compression_ratio": 32, "temporal_compression_ratio": 8,
}
VAE_23 = {**VAE_20, "block_out_channels": [256, 512, 1024, 1024], "decoder_block_out_channels": [256, 512, 512, 1024],
          "layers_per_block": [4, 6, 4, 2, 2], "decoder_layers_per_block": [4, 6, 4, 2, 2],
          "decoder_spatio_temporal_scaling": [True] * 4, "decoder_inject_noise": [False] * 5,
          "upsample_type": ["spatiotemporal", "spatiotemporal", "temporal", "spatial"],
          "upsample_residual": [False] * 4, "upsample_factor": [2, 2, 1, 2], "decoder_spatial_padding_mode": "zeros"}
AUDIO_VAE = {  # the same in 2.0 and 2.3
    "_class_name": "AutoencoderKLLTX2Audio", "base_channels": 128, "output_channels": 2, "ch_mult": [1, 2, 4],
    "num_res_blocks": 2, "attn_resolutions": None, "in_channels": 2, "resolution": 256, "latent_channels": 8,
    "norm_type": "pixel", "causality_axis": "height", "dropout": 0.0, "mid_block_add_attention": False,
    "sample_rate": 16000, "mel_hop_length": 160, "is_causal": True, "mel_bins": 64, "double_z": True,
}
VOCODER_20 = {
    "_class_name": "LTX2Vocoder", "in_channels": 128, "hidden_channels": 1024, "out_channels": 2,
    "upsample_kernel_sizes": [16, 15, 8, 4, 4], "upsample_factors": [6, 5, 2, 2, 2], "resnet_kernel_sizes": [3, 7, 11],
    "resnet_dilations": [[1, 3, 5]] * 3, "act_fn": "leaky_relu", "leaky_relu_negative_slope": 0.1, "antialias": False,
    "final_act_fn": "tanh", "final_bias": True, "output_sampling_rate": 24000,
}
VOCODER_23 = {
    "_class_name": "LTX2VocoderWithBWE", "in_channels": 128, "hidden_channels": 1536, "out_channels": 2,
    "upsample_kernel_sizes": [11, 4, 4, 4, 4, 4], "upsample_factors": [5, 2, 2, 2, 2, 2],
    "resnet_kernel_sizes": [3, 7, 11], "resnet_dilations": [[1, 3, 5]] * 3, "act_fn": "snakebeta",
    "leaky_relu_negative_slope": 0.1, "antialias": True, "antialias_ratio": 2, "antialias_kernel_size": 12,
    "final_act_fn": None, "final_bias": False, "bwe_in_channels": 128, "bwe_hidden_channels": 512,
    "bwe_out_channels": 2, "bwe_upsample_kernel_sizes": [12, 11, 4, 4, 4], "bwe_upsample_factors": [6, 5, 2, 2, 2],
    "bwe_resnet_kernel_sizes": [3, 7, 11], "bwe_resnet_dilations": [[1, 3, 5]] * 3, "bwe_act_fn": "snakebeta",
    "bwe_leaky_relu_negative_slope": 0.1, "bwe_antialias": True, "bwe_antialias_ratio": 2,
    "bwe_antialias_kernel_size": 12, "bwe_final_act_fn": None, "bwe_final_bias": False, "filter_length": 512,
    "hop_length": 80, "window_length": 512, "num_mel_channels": 64, "input_sampling_rate": 16000,
    "output_sampling_rate": 48000,
}
GEMMA3_12B = {
    "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "mm_tokens_per_image": 256,
    "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
    "text_config": {"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360,
                    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                    "vocab_size": 262208, "query_pre_attn_scalar": 256, "sliding_window": 1024,
                    "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh",
                    "max_position_embeddings": 131072},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                      "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 896, "patch_size": 14,
                      "vision_use_head": False},
}
SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0,
             "use_dynamic_shifting": True, "base_shift": 0.95, "max_shift": 2.05, "base_image_seq_len": 1024,
             "max_image_seq_len": 4096, "shift_terminal": 0.1, "time_shift_type": "exponential"}
DISTILLED_SCHEDULER = {**SCHEDULER, "use_dynamic_shifting": False, "shift_terminal": None}

_V20 = {"transformer": TRANSFORMER_20, "connectors": CONNECTORS_20, "vae": VAE_20, "audio_vae": AUDIO_VAE,
        "vocoder": VOCODER_20, "text_encoder": GEMMA3_12B}
_V23 = {**_V20, "transformer": TRANSFORMER_23, "connectors": CONNECTORS_23, "vae": VAE_23, "vocoder": VOCODER_23}
COMPONENTS = {"ltx-2": _V20, "ltx-2-distilled": _V20, "ltx-2.3": _V23}
LIBRARY = {"LTX2TextConnectors": "ltx2", "LTX2Vocoder": "ltx2", "LTX2VocoderWithBWE": "ltx2"}  # else diffusers


def component_class(class_name: str):
    """The diffusers class of a component config's `_class_name` (the connectors and the vocoders live
    in diffusers.pipelines.ltx2, the repos' model_index.json library "ltx2")."""
    import importlib

    module = "diffusers.pipelines.ltx2" if class_name in LIBRARY else "diffusers"
    return getattr(importlib.import_module(module), class_name)


def _count(module) -> float:
    return float(sum(p.numel() for p in module.parameters()))


@lru_cache(maxsize=None)
def _params(class_name: str, items: tuple) -> float:
    import torch

    config = {key: list(value) if isinstance(value, tuple) else value for key, value in items}
    with torch.device("meta"):
        return _count(component_class(class_name).from_config(config))


def _frozen(value):
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def params(config: dict) -> float:
    """Parameters of a diffusers component (transformer, connectors, VAEs, vocoder) from its config."""
    items = tuple(sorted((k, _frozen(v)) for k, v in config.items() if not k.startswith("_")))
    return _params(config["_class_name"], items)


@lru_cache(maxsize=None)
def gemma_params() -> float:
    """Gemma3ForConditionalGeneration (its vision tower included: the released text encoder holds it)."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(**GEMMA3_12B)
    with torch.device("meta"):
        return _count(transformers.Gemma3ForConditionalGeneration(config))
