"""The released models' configs (no weights), written in the layouts the adapters read.

HunyuanVideo: diffusers' HunyuanVideoTransformer3DModel and AutoencoderKLHunyuanVideo defaults
are the release (hunyuanvideo-community/HunyuanVideo); its text encoders are llava-llama-3-8b's
Llama (4096 wide, 32 layers) and CLIP ViT-L/14's text model. OpenSoraPlan v1.3: the
any93x640x640 transformer (32 layers, 24 heads x 96, Skiparse sparse_n 4, mT5-xxl captions),
WFVAE D8 4x8x8 and google/mt5-xxl's encoder. Wan (wan-1.3b, wan-14b, wan-a14b, wan-ti2v-5b):
released_wan. Widths and depths agree with pipedit.planner.models' full-size specs (a test checks
the parameter counts).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipedit import families
from pipedit.errors import UserInputError
from pipedit.planner.models import HUNYUAN_VAE

_HUNYUAN_INDEX = {
    "_class_name": "HunyuanVideoPipeline",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "LlamaModel"], "text_encoder_2": ["transformers", "CLIPTextModel"],
    "tokenizer": ["transformers", "PreTrainedTokenizerFast"], "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "transformer": ["diffusers", "HunyuanVideoTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLHunyuanVideo"],
}
_HUNYUAN_TRANSFORMER = {
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

_OSP_TRANSFORMER = {
    "_class_name": "OpenSoraT2V_v1_3", "num_attention_heads": 24, "attention_head_dim": 96, "in_channels": 8,
    "out_channels": 8, "num_layers": 32, "cross_attention_dim": 2304, "attention_bias": True,
    "sample_size_h": [80, 80], "sample_size_w": [80, 80], "sample_size_t": 24, "patch_size": 2, "patch_size_t": 1,
    "activation_fn": "gelu-approximate", "norm_elementwise_affine": False, "norm_eps": 1e-6,
    "caption_channels": 4096, "interpolation_scale_h": 1.0, "interpolation_scale_w": 1.0,
    "interpolation_scale_t": 1.0, "sparse1d": True, "sparse_n": 4,
}
_WFVAE = {
    "_class_name": "WFVAEModel", "latent_dim": 8, "base_channels": 128, "encoder_num_resblocks": 2,
    "encoder_energy_flow_hidden_size": 64, "decoder_num_resblocks": 2, "decoder_energy_flow_hidden_size": 128,
    "use_attention": True, "norm_type": "layernorm", "t_interpolation": "trilinear", "connect_res_layer_num": 2,
    "scale": [0.18215] * 8, "shift": [0.0] * 8, "attention_type": "AttnBlock3DFix",
}
_MT5_XXL = {
    "model_type": "mt5", "architectures": ["MT5EncoderModel"], "d_model": 4096, "d_ff": 10240, "d_kv": 64,
    "num_heads": 64, "num_layers": 24, "vocab_size": 250112, "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32, "tie_word_embeddings": False,
}


def _write(folder: Path, name: str, config: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(config, indent=1))


def released_checkpoint(model: str, folder: str | Path) -> Path:
    """Writes `model`'s released configs into `folder` (no weights); returns the folder."""
    root = Path(folder)
    sizes = families.full_size_models()
    if model not in sizes:
        entry = families.find(model)
        if entry is not None:
            raise UserInputError(f"dry-run needs the {model} release to model without --model-path: --model "
                                 f"{' | '.join(families.load(entry.planner.full_size))}")
        raise UserInputError(f"dry-run has no released configs for {model!r}: use --model {', '.join(sizes)}, "
                             f"or give --model-path")
    entry = families.family_for_release(model)
    return families.load(entry.dry_run.released)(model, root)


def write_hunyuan_video(model: str, root: Path) -> Path:
    _write(root, "model_index.json", _HUNYUAN_INDEX)
    _write(root / "transformer", "config.json", _HUNYUAN_TRANSFORMER)
    _write(root / "vae", "config.json", {"_class_name": "AutoencoderKLHunyuanVideo", **HUNYUAN_VAE})
    _write(root / "text_encoder", "config.json", _LLAMA)
    _write(root / "text_encoder_2", "config.json", _CLIP_TEXT)
    _write(root / "scheduler", "scheduler_config.json", _FLOW_SCHEDULER)
    for name in ("tokenizer", "tokenizer_2"):
        _write(root / name, "tokenizer_config.json", {"model_max_length": 77})
    return root


def write_opensora_plan(model: str, root: Path) -> Path:
    _write(root / "any93x640x640", "config.json", _OSP_TRANSFORMER)
    _write(root / "vae", "config.json", _WFVAE)
    _write(root / "text_encoder", "config.json", _MT5_XXL)
    return root
