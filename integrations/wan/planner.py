"""The planner's view of Wan2.1 / Wan2.2 (pipedit.planner): specs of the releases (wan-1.3b,
wan-14b, wan-a14b, wan-ti2v-5b, from .release's configs, parameter counts from their dims), the
spec of a checkpoint, and the causal VAE's decode cost (.vae_cost). Wan decodes untiled only, as
WanPipeline does, in frame chunks in order on one rank: its decode has no split."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pipedit.mapped_weights import checkpoint_bytes
from pipedit.planner.cost import ACT_BYTES, Shape
from pipedit.planner.models import ModelSpec, TextEncoder, param_count, read_config

from . import release


def _vae(config: dict) -> dict:
    return {**config, "temporal_compression_ratio": int(config.get("scale_factor_temporal") or 4),
            "spatial_compression_ratio": int(config.get("scale_factor_spatial") or 8)}


def wan_spec(name: str, dit: dict, vae: dict, experts: int = 1, image_encoder: dict | None = None) -> ModelSpec:
    """A Wan spec from its transformer and VAE configs (diffusers' config.json keys)."""
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    hidden = heads * head_dim
    encoders = (TextEncoder("umt5-xxl-encoder", release.umt5_params(release.UMT5_XXL), release.TEXT_TOKENS),)
    if image_encoder is not None:
        encoders += (TextEncoder("clip-vit-h-vision", release.clip_vision_params(image_encoder),
                                 release.IMAGE_TOKENS),)
    return ModelSpec(
        name=name, family="wan", hidden=hidden, heads=heads, head_dim=head_dim, dual_layers=0,
        single_layers=int(dit["num_layers"]), mlp_ratio=int(dit["ffn_dim"]) / hidden,
        text_tokens=release.TEXT_TOKENS, cross_attention=True, cfg_batch=2,
        dit_params=float(release.transformer_params(dit)), patch=tuple(int(p) for p in dit["patch_size"]),
        latent_channels=int(vae["z_dim"]), vae=_vae(vae), vae_params=float(release.vae_params(vae)),
        text_encoders=encoders, experts=experts, vae_tiling=False, text_beside_vae=True,
    )


def wan_released(name: str) -> ModelSpec:
    return wan_spec(release.LABELS[name], release.TRANSFORMERS[name], release.VAES[name],
                    release.EXPERTS.get(name, 1))


def wan_i2v_14b() -> ModelSpec:
    """Wan2.1 I2V 14B as released (not a `--model` choice: the validation's published cells)."""
    return wan_spec("Wan2.1 I2V 14B", release.I2V_14B, release.VAE_21, 1, release.CLIP_VIT_H)


SIZES = {name: (lambda name=name: wan_released(name)) for name in release.RELEASES}


def from_checkpoint(root: Path) -> ModelSpec:
    """The checkpoint's dims (config.json of transformer/ and vae/; a second expert when
    model_index.json names transformer_2, with its files' bytes in their dtype; the CLIP image
    encoder of Wan2.1 I2V)."""
    index = read_config(root / "model_index.json")
    two = isinstance(index.get("transformer_2"), list) and index["transformer_2"][0] is not None
    image = isinstance(index.get("image_encoder"), list) and index["image_encoder"][0] is not None
    encoder = None
    if image:
        config = read_config(root / "image_encoder" / "config.json")
        encoder = {**release.CLIP_VIT_H, **{k: config[k] for k in release.CLIP_VIT_H if k in config}}
    dit = read_config(root / "transformer" / "config.json")
    spec = wan_spec(f"{root.name} (Wan, {dit['num_attention_heads']}x{dit['attention_head_dim']})", dit,
                    {**release.VAE_21, **read_config(root / "vae" / "config.json")}, 2 if two else 1, encoder)
    found = []
    for folder, tokens in (("text_encoder", release.TEXT_TOKENS), ("image_encoder", release.IMAGE_TOKENS)):
        params = param_count(root / folder)
        if params is not None:
            found.append(TextEncoder(folder, params, tokens))
    return replace(spec, dit_params=param_count(root / "transformer") or spec.dit_params,
                   vae_params=param_count(root / "vae") or spec.vae_params,
                   text_encoders=tuple(found) or spec.text_encoders,
                   expert_file_bytes=float((two and checkpoint_bytes(root / "transformer_2")) or 0.0))


def vae_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    """Untiled only (the adapter decodes as WanPipeline does)."""
    from .vae_cost import decode_flops

    return decode_flops(model.vae, *model.latent_shape(height, width, frames))


def decode_peak_bytes(model: ModelSpec, shape: Shape, tiled: bool) -> float:
    from .vae_cost import decode_peak_bytes as walked_peak_bytes

    return walked_peak_bytes(model.vae, *model.latent_shape(shape.height, shape.width, shape.frames), ACT_BYTES)
