"""HunyuanVideo's released configs (no weights) in the diffusers layout the adapter reads: diffusers'
HunyuanVideoTransformer3DModel and AutoencoderKLHunyuanVideo defaults are the release
(hunyuanvideo-community/HunyuanVideo); its text encoders are llava-llama-3-8b's Llama (4096 wide, 32
layers) and CLIP ViT-L/14's text model. Widths and depths agree with .planner's full-size spec (a
test checks the parameter counts)."""

from __future__ import annotations

from pathlib import Path

from pipedit.dryrun.released import write_config

from .planner import VAE

_INDEX = {
    "_class_name": "HunyuanVideoPipeline",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "LlamaModel"], "text_encoder_2": ["transformers", "CLIPTextModel"],
    "tokenizer": ["transformers", "PreTrainedTokenizerFast"], "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "transformer": ["diffusers", "HunyuanVideoTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLHunyuanVideo"],
}
_TRANSFORMER = {
    "_class_name": "HunyuanVideoTransformer3DModel", "in_channels": 16, "out_channels": 16,
    "num_attention_heads": 24, "attention_head_dim": 128, "num_layers": 20, "num_single_layers": 40,
    "num_refiner_layers": 2, "mlp_ratio": 4.0, "patch_size": 2, "patch_size_t": 1, "qk_norm": "rms_norm",
    "guidance_embeds": True, "text_embed_dim": 4096, "pooled_projection_dim": 768, "rope_theta": 256.0,
    "rope_axes_dim": [16, 56, 56],
}
_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaModel"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128320,
    "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "dtype": "float16",
}
_CLIP_TEXT = {
    "model_type": "clip_text_model", "architectures": ["CLIPTextModel"], "hidden_size": 768,
    "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 49408,
    "max_position_embeddings": 77, "projection_dim": 768, "hidden_act": "quick_gelu", "dtype": "float16",
}
_FLOW_SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 7.0}


def write_release(model: str, root: Path) -> Path:
    write_config(root, "model_index.json", _INDEX)
    write_config(root / "transformer", "config.json", _TRANSFORMER)
    write_config(root / "vae", "config.json", {"_class_name": "AutoencoderKLHunyuanVideo", **VAE})
    write_config(root / "text_encoder", "config.json", _LLAMA)
    write_config(root / "text_encoder_2", "config.json", _CLIP_TEXT)
    write_config(root / "scheduler", "scheduler_config.json", _FLOW_SCHEDULER)
    for name in ("tokenizer", "tokenizer_2"):
        write_config(root / name, "tokenizer_config.json", {"model_max_length": 77})
    return root
