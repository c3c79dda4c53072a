"""HunyuanVideo 1.5 as released (hunyuanvideo-community's HunyuanVideo-1.5 *-Diffusers checkpoints,
480p and 720p, text- and image-to-video): the configs for the planner's specs and the dry run's
released folders, parameter counts taken from the modules built on the meta device (never typed in).

The DiT (HunyuanVideo15Transformer3DModel) is diffusers' defaults: 54 dual-stream blocks of
16 heads x 128, patch 1, 65 input channels (32 latent + 32 condition + 1 mask), 8.3B parameters;
its joint attention takes up to 729 SigLIP image tokens (image-to-video), 256 ByT5 tokens and 1000
Qwen2.5-VL tokens besides the video. The releases differ in target_size (the image-to-video size
bucket) and task_type only. The VAE (AutoencoderKLHunyuanVideo15, diffusers' defaults): 32 latent
channels, 16x spatial and 4x temporal, decoded in one pass over the whole video (spatial tiles of
256 pixels overlapping by a quarter when tiled). Text encoders: Qwen2.5-VL-7B's text model and
ByT5-small's encoder (Glyph-SDXL-v2's); image-to-video adds SigLIP so400m-patch14-384.
"""

from __future__ import annotations

from functools import lru_cache

# The 480p and 720p releases have the same DiT, VAE and encoders (target_size 480 or 720 only sets
# the image-to-video size bucket): one planned model per task, any video size. name: (target_size, task_type)
RELEASES = {"hunyuan-video-1.5": (720, "t2v"), "hunyuan-video-1.5-i2v": (720, "i2v")}
MLLM_TOKENS, GLYPH_TOKENS, IMAGE_TOKENS = 1000, 256, 729
TEMPLATE_TOKENS = 108  # the chat template's start: Qwen runs over it, the DiT never sees it

TRANSFORMER = {
    "_class_name": "HunyuanVideo15Transformer3DModel", "in_channels": 65, "out_channels": 32,
    "num_attention_heads": 16, "attention_head_dim": 128, "num_layers": 54, "num_refiner_layers": 2,
    "mlp_ratio": 4.0, "patch_size": 1, "patch_size_t": 1, "qk_norm": "rms_norm", "text_embed_dim": 3584,
    "text_embed_2_dim": 1472, "image_embed_dim": 1152, "rope_theta": 256.0, "rope_axes_dim": [16, 56, 56],
    "use_meanflow": False,
}
VAE = {"_class_name": "AutoencoderKLHunyuanVideo15", "in_channels": 3, "out_channels": 3, "latent_channels": 32,
       "block_out_channels": [128, 256, 512, 1024, 1024], "layers_per_block": 2, "spatial_compression_ratio": 16,
       "temporal_compression_ratio": 4, "downsample_match_channel": True, "upsample_match_channel": True,
       "scaling_factor": 1.03682}
QWEN_TEXT = {"model_type": "qwen2_5_vl_text", "architectures": ["Qwen2_5_VLTextModel"], "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
             "rms_norm_eps": 1e-06, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                        "mrope_section": [16, 24, 24]}}
BYT5_ENCODER = {"model_type": "t5", "architectures": ["T5EncoderModel"], "d_model": 1472, "d_ff": 3584, "d_kv": 64,
                "num_heads": 6, "num_layers": 12, "vocab_size": 384, "feed_forward_proj": "gated-gelu",
                "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
                "tie_word_embeddings": False}
SIGLIP = {"model_type": "siglip_vision_model", "architectures": ["SiglipVisionModel"], "hidden_size": 1152,
          "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 384,
          "patch_size": 14, "num_channels": 3}


def transformer_config(release: str) -> dict:
    target_size, task = RELEASES[release]
    return {**TRANSFORMER, "target_size": target_size, "task_type": task}


def _count(module) -> float:
    return float(sum(p.numel() for p in module.parameters()))


@lru_cache(maxsize=None)
def diffusers_params(class_name: str, items: tuple) -> float:
    """Parameters of diffusers' `class_name` built from a config (as sorted items), on meta."""
    import diffusers
    import torch

    config = {key: list(value) if isinstance(value, tuple) else value for key, value in items if key != "_class_name"}
    with torch.device("meta"):
        return _count(getattr(diffusers, class_name)(**config))


@lru_cache(maxsize=None)
def transformers_params(name: str) -> float:
    """Parameters of one of the released text or image encoders (QWEN_TEXT, BYT5_ENCODER, SIGLIP)."""
    import torch
    import transformers

    config = {"QWEN_TEXT": QWEN_TEXT, "BYT5_ENCODER": BYT5_ENCODER, "SIGLIP": SIGLIP}[name]
    model = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        return _count(getattr(transformers, config["architectures"][0])(model))


def params(config: dict) -> float:
    return diffusers_params(config["_class_name"], tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                                                for k, v in config.items())))


# -- the planner's view ------------------------------------------------------------------------


def spec(name: str, dit: dict, vae: dict, image: bool, dit_params: float | None = None,
         vae_params: float | None = None, encoders: tuple | None = None):
    """A ModelSpec from a transformer and a VAE config (diffusers' config.json keys)."""
    from pipedit.planner.models import ModelSpec, TextEncoder

    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    patch, patch_t = int(dit.get("patch_size", 1)), int(dit.get("patch_size_t", 1))
    if encoders is None:
        encoders = (TextEncoder("qwen2.5-vl-7b-text", transformers_params("QWEN_TEXT"), MLLM_TOKENS + TEMPLATE_TOKENS),
                    TextEncoder("byt5-small-encoder", transformers_params("BYT5_ENCODER"), GLYPH_TOKENS))
        if image:
            encoders += (TextEncoder("siglip-so400m-vision", transformers_params("SIGLIP"), IMAGE_TOKENS),)
    return ModelSpec(
        name=name, family="hunyuan-video-1.5", hidden=heads * head_dim, heads=heads, head_dim=head_dim,
        dual_layers=int(dit["num_layers"]), single_layers=0, mlp_ratio=float(dit.get("mlp_ratio", 4.0)),
        text_tokens=MLLM_TOKENS + GLYPH_TOKENS + (IMAGE_TOKENS if image else 0), cross_attention=False,
        cfg_batch=2, dit_params=dit_params or params(dit), patch=(patch_t, patch, patch),
        latent_channels=int(vae["latent_channels"]), vae={**VAE, **vae},
        vae_params=vae_params or params({**VAE, **vae}),
        text_encoders=encoders, text_beside_vae=True,
    )


def released(release: str):
    target_size, task = RELEASES[release]
    label = f"HunyuanVideo 1.5 {'I2V' if task == 'i2v' else 'T2V'} (8.3B)"
    return spec(label, transformer_config(release), VAE, task == "i2v")


SIZES = {name: (lambda name=name: released(name)) for name in RELEASES}


def from_checkpoint(root):
    """The checkpoint's dims (transformer/ and vae/ config.json) and parameter counts (safetensors
    headers); image-to-video when model_index.json names that pipeline."""
    from pipedit.planner.models import TextEncoder, param_count, read_config

    index = read_config(root / "model_index.json")
    image = index.get("_class_name") == "HunyuanVideo15ImageToVideoPipeline"
    dit = read_config(root / "transformer" / "config.json")
    found = []
    for folder, tokens in (("text_encoder", MLLM_TOKENS + TEMPLATE_TOKENS), ("text_encoder_2", GLYPH_TOKENS),
                           ("image_encoder", IMAGE_TOKENS)):
        count = param_count(root / folder)
        if count is not None:
            found.append(TextEncoder(folder, count, tokens))
    name = f"{root.name} (HunyuanVideo 1.5, {dit['num_attention_heads']}x{dit['attention_head_dim']})"
    return spec(name, dit, read_config(root / "vae" / "config.json"), image, param_count(root / "transformer"),
                param_count(root / "vae"), tuple(found) or None)


def decode_peak_bytes(model, shape, tiled: bool) -> float:
    """One decode at bf16 (tiled: one 256-pixel tile, all frames), by the adapter's own predictor
    (.vae_memory), so auto tiling and the planner agree."""
    import torch

    from .vae_memory import predict_decode_peak_bytes, predict_tiled_peak_bytes

    latents = (1, model.latent_channels, *model.latent_shape(shape.height, shape.width, shape.frames))
    predict = predict_tiled_peak_bytes if tiled else predict_decode_peak_bytes
    return predict(model.vae, latents, torch.bfloat16)


def decode_flops(model, height: int, width: int, frames: int, tiled: bool) -> float:
    """HunyuanVideo's decoder walk (its planner's pass_flops) over the 1.5 VAE's config in one
    pass (this VAE decodes the whole video at once); tiled: the overlapping tiles' extra pixels."""
    from pipedit.integrations.hunyuan_video.planner import pass_flops
    from pipedit.planner.vae_cost import tile_factor

    lt, lh, lw = model.latent_shape(height, width, frames)
    flops = pass_flops(model.vae, lt, lh, lw)
    return flops * (tile_factor(height) * tile_factor(width) if tiled else 1.0)
