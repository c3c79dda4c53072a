"""What the cost model needs to know about a model, read from its configs.

Full-size specs: HunyuanVideo as released (diffusers HunyuanVideoTransformer3DModel: 20
dual-stream + 40 single-stream blocks, 3072 = 24 heads x 128) and OpenSoraPlan v1.3 (2.77B
parameters, 32 layers, 24 heads x 96, Skiparse sparse_n 4 on layers 2..29, cross-attention to
512 mT5 tokens, WFVAE 4x8x8). `from_checkpoint` reads the same fields from a diffusers-layout
checkpoint's transformer/ and vae/ config.json, so the demo model and the full-width synthetic
checkpoint are planned from their real widths. Wan2.1 / Wan2.2 (wan-1.3b, wan-14b, wan-a14b,
wan-ti2v-5b): pipedit.planner.wan's released configs, parameter counts from their dims.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import families
from ..errors import UserInputError
from . import wan as wan_release

# diffusers AutoencoderKLHunyuanVideo defaults = the released VAE.
HUNYUAN_VAE = {"latent_channels": 16, "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
               "spatial_compression_ratio": 8, "temporal_compression_ratio": 4, "out_channels": 3,
               "mid_block_add_attention": True}
# WFVAE-S decoder (facts sheet §3): base 128 channels, energy-flow 128, connect_res_layer_num 2.
WFVAE = {"latent_channels": 8, "base_channels": 128, "decoder_energy_flow_hidden_size": 128,
         "connect_res_layer_num": 2, "spatial_compression_ratio": 8, "temporal_compression_ratio": 4}


@dataclass(frozen=True)
class TextEncoder:
    name: str
    params: float  # parameters
    tokens: int  # tokens per prompt it runs on


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # its pipedit.families name
    hidden: int
    heads: int
    head_dim: int
    dual_layers: int  # blocks whose text tokens have their own projections (HunyuanVideo)
    single_layers: int  # blocks over one joint or video-only stream
    mlp_ratio: float
    text_tokens: int  # text tokens joining self-attention (HunyuanVideo) or cross-attended (OpenSoraPlan)
    cross_attention: bool  # text enters by cross-attention (OpenSoraPlan), else joint attention
    sparse_layers: int = 0  # Skiparse layers: attention within sparse_n sub-sequences
    sparse_n: int = 1
    cfg_batch: int = 1  # 2: classifier-free guidance runs cond and uncond together
    dit_params: float = 0.0
    dit_bytes_per_param: int = 2  # bf16 serving
    patch: tuple[int, int, int] = (1, 2, 2)  # (t, h, w)
    latent_channels: int = 16
    vae: dict = field(default_factory=dict)
    vae_params: float = 0.0
    text_encoders: tuple[TextEncoder, ...] = ()
    experts: int = 1  # transformers switched during denoising (Wan2.2 A14B: 2), same size each
    vae_tiling: bool = True  # spatially tiled decoding is available (Wan decodes untiled only)
    text_beside_vae: bool = False  # the text encoders live on a decode rank when there is one
    lora_bytes: float = 0.0  # unfused LoRA adapters every denoise rank holds (pipedit.planner.memory.adapter_bytes)

    @property
    def layers(self) -> int:
        return self.dual_layers + self.single_layers

    @property
    def compression(self) -> tuple[int, int]:
        return self.vae["temporal_compression_ratio"], self.vae["spatial_compression_ratio"]

    def latent_shape(self, height: int, width: int, frames: int) -> tuple[int, int, int]:
        """(latent frames, latent height, latent width)."""
        t, s = self.compression
        return (frames - 1) // t + 1, height // s, width // s

    def video_tokens(self, height: int, width: int, frames: int) -> int:
        lt, lh, lw = self.latent_shape(height, width, frames)
        pt, ph, pw = self.patch
        return -(-lt // pt) * (lh // ph) * (lw // pw)

    @property
    def text_params(self) -> float:
        return sum(e.params for e in self.text_encoders)


def hunyuan_video() -> ModelSpec:
    return ModelSpec(
        name="HunyuanVideo (13B)", family="hunyuan-video", hidden=3072, heads=24, head_dim=128,
        dual_layers=20, single_layers=40, mlp_ratio=4.0, text_tokens=256, cross_attention=False,
        dit_params=12.8e9, latent_channels=16, vae=HUNYUAN_VAE, vae_params=246e6,
        # LLaMA-3-8B-based MLLM encoder (256 prompt tokens) and CLIP ViT-L/14's text model (77).
        text_encoders=(TextEncoder("llava-llama-3-8b", 7.5e9, 256), TextEncoder("clip-vit-l", 123e6, 77)),
        text_beside_vae=True,
    )


def opensora_plan() -> ModelSpec:
    return ModelSpec(
        name="OpenSoraPlan v1.3 (2.8B)", family="opensora-plan", hidden=2304, heads=24, head_dim=96,
        dual_layers=0, single_layers=32, mlp_ratio=4.0, text_tokens=512, cross_attention=True,
        sparse_layers=28, sparse_n=4, cfg_batch=2, dit_params=2.77e9, latent_channels=8,
        vae=WFVAE, vae_params=146e6,
        text_encoders=(TextEncoder("mt5-xxl-encoder", 5.7e9, 512),),
    )


def _wan_vae(config: dict) -> dict:
    return {**config, "temporal_compression_ratio": int(config.get("scale_factor_temporal") or 4),
            "spatial_compression_ratio": int(config.get("scale_factor_spatial") or 8)}


def wan_spec(name: str, dit: dict, vae: dict, experts: int = 1, image_encoder: dict | None = None) -> ModelSpec:
    """A Wan spec from its transformer and VAE configs (diffusers' config.json keys)."""
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    hidden = heads * head_dim
    encoders = (TextEncoder("umt5-xxl-encoder", wan_release.umt5_params(wan_release.UMT5_XXL),
                            wan_release.TEXT_TOKENS),)
    if image_encoder is not None:
        encoders += (TextEncoder("clip-vit-h-vision", wan_release.clip_vision_params(image_encoder),
                                 wan_release.IMAGE_TOKENS),)
    return ModelSpec(
        name=name, family="wan", hidden=hidden, heads=heads, head_dim=head_dim, dual_layers=0,
        single_layers=int(dit["num_layers"]), mlp_ratio=int(dit["ffn_dim"]) / hidden,
        text_tokens=wan_release.TEXT_TOKENS, cross_attention=True, cfg_batch=2,
        dit_params=float(wan_release.transformer_params(dit)), patch=tuple(int(p) for p in dit["patch_size"]),
        latent_channels=int(vae["z_dim"]), vae=_wan_vae(vae), vae_params=float(wan_release.vae_params(vae)),
        text_encoders=encoders, experts=experts, vae_tiling=False, text_beside_vae=True,
    )


def wan_released(name: str) -> ModelSpec:
    return wan_spec(wan_release.LABELS[name], wan_release.TRANSFORMERS[name], wan_release.VAES[name],
                    wan_release.EXPERTS.get(name, 1))


def wan_i2v_14b() -> ModelSpec:
    """Wan2.1 I2V 14B as released (not a `--model` choice: the validation's published cells)."""
    return wan_spec("Wan2.1 I2V 14B", wan_release.I2V_14B, wan_release.VAE_21, 1, wan_release.CLIP_VIT_H)


# Each family's full-size models (pipedit.families' planner.full_size).
HUNYUAN_VIDEO_SIZES = {"hunyuan-video": hunyuan_video}
OPENSORA_PLAN_SIZES = {"opensora-plan": opensora_plan}
WAN_SIZES = {name: (lambda name=name: wan_released(name)) for name in wan_release.RELEASES}


def model_names() -> tuple[str, ...]:
    """The full-size models every registered family plans (hunyuan-video, ..., wan-1.3b, ...)."""
    return tuple(families.full_size_models())


def full_size(name: str) -> ModelSpec:
    sizes = families.full_size_models()
    if name not in sizes:
        raise UserInputError(f"unknown model '{name}'; models: {', '.join(sizes)}")
    return sizes[name]()


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserInputError(f"{path} is missing or not JSON ({error}); --model-path needs a "
                             f"diffusers-layout checkpoint with transformer/ and vae/ configs") from error


def _param_count(folder: Path) -> float | None:
    """Parameters from safetensors headers (no weights are read), or None."""
    total = 0
    files = sorted(folder.glob("*.safetensors"))
    for file in files:
        with file.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for key, entry in header.items():
            if key != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return float(total) if files else None


def _text_encoders(root: Path, default: tuple[TextEncoder, ...]) -> tuple[TextEncoder, ...]:
    found = []
    for encoder, tokens in (("text_encoder", 256), ("text_encoder_2", 77)):
        params = _param_count(root / encoder)
        if params is not None:
            found.append(TextEncoder(encoder, params, tokens))
    return tuple(found) or default


def from_checkpoint(path: str | Path, family: str = families.DEFAULT) -> ModelSpec:
    """A spec with the widths, depths and parameter counts of the checkpoint at `path`."""
    return families.load(families.family(family).planner.from_checkpoint)(Path(path))


def _with_params(spec: ModelSpec, transformer: Path, root: Path) -> ModelSpec:
    return replace(spec, dit_params=_param_count(transformer) or spec.dit_params,
                   vae_params=_param_count(root / "vae") or spec.vae_params)


def hunyuan_video_from_checkpoint(root: Path) -> ModelSpec:
    folder = root / "transformer"
    dit = _read(folder / "config.json")
    vae = _read(root / "vae" / "config.json")
    base = hunyuan_video()
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    vae_config = {**HUNYUAN_VAE, **{k: vae[k] for k in HUNYUAN_VAE if k in vae}}
    spec = replace(base, name=f"{root.name} (HunyuanVideo, {heads}x{head_dim})", heads=heads,
                   head_dim=head_dim, hidden=heads * head_dim, dual_layers=int(dit["num_layers"]),
                   single_layers=int(dit["num_single_layers"]), mlp_ratio=float(dit.get("mlp_ratio", 4.0)),
                   patch=(int(dit.get("patch_size_t", 1)), int(dit["patch_size"]), int(dit["patch_size"])),
                   latent_channels=int(dit["in_channels"]), vae=vae_config,
                   text_encoders=_text_encoders(root, base.text_encoders))
    return _with_params(spec, folder, root)


def opensora_plan_from_checkpoint(root: Path) -> ModelSpec:
    """diffusers layout: transformer/; the release layout: any93x640x640/ (or the one folder
    holding its transformer config)."""
    folder = root / "transformer"
    if not (folder / "config.json").is_file():
        from pipedit.integrations.opensora_plan.checkpoint import find_transformer_folder

        folder = find_transformer_folder(root)
    dit = _read(folder / "config.json")
    vae = _read(root / "vae" / "config.json")
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    layers = int(dit["num_layers"])
    # Skiparse layers are 2..29 whatever the depth (facts sheet §1).
    sparse = max(0, min(layers, 30) - 2) if dit.get("sparse1d", True) else 0
    vae_config = {**WFVAE, **{k: vae[k] for k in WFVAE if k in vae}}
    vae_config["latent_channels"] = int(vae.get("latent_dim", vae_config["latent_channels"]))
    spec = replace(opensora_plan(), name=f"{root.name} (OpenSoraPlan, {heads}x{head_dim})", heads=heads,
                   head_dim=head_dim, hidden=heads * head_dim, single_layers=layers, sparse_layers=sparse,
                   sparse_n=int(dit.get("sparse_n", 4)), latent_channels=int(dit["in_channels"]), vae=vae_config)
    return _with_params(spec, folder, root)


def wan_from_checkpoint(root: Path) -> ModelSpec:
    """The checkpoint's dims (config.json of transformer/ and vae/; a second expert when
    model_index.json names transformer_2; the CLIP image encoder of Wan2.1 I2V)."""
    index = _read(root / "model_index.json")
    two = isinstance(index.get("transformer_2"), list) and index["transformer_2"][0] is not None
    image = isinstance(index.get("image_encoder"), list) and index["image_encoder"][0] is not None
    encoder = None
    if image:
        config = _read(root / "image_encoder" / "config.json")
        encoder = {**wan_release.CLIP_VIT_H, **{k: config[k] for k in wan_release.CLIP_VIT_H if k in config}}
    dit = _read(root / "transformer" / "config.json")
    spec = wan_spec(f"{root.name} (Wan, {dit['num_attention_heads']}x{dit['attention_head_dim']})", dit,
                    {**wan_release.VAE_21, **_read(root / "vae" / "config.json")}, 2 if two else 1, encoder)
    found = []
    for folder, tokens in (("text_encoder", wan_release.TEXT_TOKENS), ("image_encoder", wan_release.IMAGE_TOKENS)):
        params = _param_count(root / folder)
        if params is not None:
            found.append(TextEncoder(folder, params, tokens))
    return replace(spec, dit_params=_param_count(root / "transformer") or spec.dit_params,
                   vae_params=_param_count(root / "vae") or spec.vae_params,
                   text_encoders=tuple(found) or spec.text_encoders)


def family_of(path: str | Path) -> str:
    """The model family of a checkpoint (pipedit.families.family_of_checkpoint): its
    model_index.json's pipeline, else the family release layout it matches; ModelPathError
    naming the known pipelines otherwise."""
    return families.family_of_checkpoint(path).name
