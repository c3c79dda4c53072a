"""Tiny LoRA files written in tests, in the forms diffusers' loaders read: the diffusers/PEFT keys
(`transformer.<layer>.lora_A.weight`, rank and alpha in diffusers' adapter metadata), Wan's original
trainer form (`diffusion_model.<layer>.lora_down/lora_up/alpha` with `diff_b` bias deltas) and
HunyuanVideo's original form (`diffusion_model.double_blocks.N.img_attn_qkv.lora_A.weight`).
Ranks and alphas are given by each test (other values than any default: alpha != rank), values are
seeded and large enough to move the latents visibly."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file


def _linear(model: torch.nn.Module, layer: str) -> torch.nn.Linear:
    module = dict(model.named_modules())[layer]
    assert isinstance(module, torch.nn.Linear), layer
    return module


def _pair(generator, rank: int, fan_in: int, fan_out: int, std: float):
    down = torch.randn(rank, fan_in, generator=generator) * std
    up = torch.randn(fan_out, rank, generator=generator) * std
    return down, up


def write_peft_lora(path: Path, model: torch.nn.Module, layers: list[str], rank: int, alpha: float, seed: int,
                    std: float = 0.3) -> Path:
    """The diffusers/PEFT form, saved as diffusers saves it (save_lora_weights with metadata)."""
    from diffusers.loaders import WanLoraLoaderMixin

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in layers:
        linear = _linear(model, layer)
        down, up = _pair(generator, rank, linear.in_features, linear.out_features, std)
        tensors[f"{layer}.lora_A.weight"], tensors[f"{layer}.lora_B.weight"] = down, up
    metadata = {"r": rank, "lora_alpha": alpha, "target_modules": sorted(layers)}
    WanLoraLoaderMixin.save_lora_weights(path.parent, transformer_lora_layers=tensors, weight_name=path.name,
                                         transformer_lora_adapter_metadata=metadata)
    return path


def write_original_wan_lora(path: Path, model: torch.nn.Module, layers: dict[str, str], rank: int,
                            alpha: float | None, seed: int, std: float = 0.3, bias: bool = True,
                            parts: tuple[str, str] = ("lora_down", "lora_up")) -> Path:
    """Wan's original form (and LTX-2's: the same keys); `layers` maps the original layer names
    (blocks.0.self_attn.q) to the diffusers layers that give their shapes (blocks.0.attn1.to_q).
    `alpha` None: no alpha keys; `bias`: a diff_b per layer; `parts`: the pair's key names. The
    matrices are those write_peft_lora draws for the same layers, rank and seed."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for original, layer in layers.items():
        linear = _linear(model, layer)
        down, up = _pair(generator, rank, linear.in_features, linear.out_features, std)
        key = f"diffusion_model.{original}"
        tensors[f"{key}.{parts[0]}.weight"], tensors[f"{key}.{parts[1]}.weight"] = down, up
        if alpha is not None:
            tensors[f"{key}.alpha"] = torch.tensor(float(alpha))
        if bias:
            tensors[f"{key}.diff_b"] = torch.randn(linear.out_features, generator=generator) * std
    save_file(tensors, str(path))
    return path


def write_original_hunyuan_lora(path: Path, model: torch.nn.Module, blocks: list[int], rank: int, seed: int,
                                std: float = 0.3) -> Path:
    """HunyuanVideo's original form: the fused q/k/v projection of the given dual-stream blocks and
    their image MLP's first layer (the converter splits the qkv lora_B in three)."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for block in blocks:
        to_q = _linear(model, f"transformer_blocks.{block}.attn.to_q")
        down, up = _pair(generator, rank, to_q.in_features, 3 * to_q.out_features, std)
        key = f"diffusion_model.double_blocks.{block}.img_attn_qkv"
        tensors[f"{key}.lora_A.weight"], tensors[f"{key}.lora_B.weight"] = down, up
        fc1 = _linear(model, f"transformer_blocks.{block}.ff.net.0.proj")
        down, up = _pair(generator, rank, fc1.in_features, fc1.out_features, std)
        key = f"diffusion_model.double_blocks.{block}.img_mlp.fc1"
        tensors[f"{key}.lora_A.weight"], tensors[f"{key}.lora_B.weight"] = down, up
    save_file(tensors, str(path))
    return path


# -- the adapters the parity tests use (one rank: tests/lora; Ulysses 2: tests/runtime) ------------
WAN_PEFT_LAYERS = ["blocks.0.attn1.to_q", "blocks.1.attn1.to_v", "blocks.0.ffn.net.0.proj", "proj_out"]
WAN_ORIGINAL_LAYERS = {"blocks.0.self_attn.q": "blocks.0.attn1.to_q",
                       "blocks.1.cross_attn.o": "blocks.1.attn2.to_out.0", "blocks.1.ffn.2": "blocks.1.ffn.net.2"}


def write_wan_adapters(checkpoint: Path, folder: Path) -> tuple[Path, Path]:
    """(diffusers/PEFT form: rank 3, alpha 5, self-attention q and v, the FFN's first layer and
    proj_out, which the sequence-parallel plan hooks; Wan's original form: rank 2, alpha 7, diff_b
    on every layer it targets)."""
    from diffusers import WanTransformer3DModel

    model = WanTransformer3DModel.from_pretrained(checkpoint / "transformer")
    return (write_peft_lora(folder / "style.safetensors", model, WAN_PEFT_LAYERS, rank=3, alpha=5, seed=1),
            write_original_wan_lora(folder / "distill.safetensors", model, WAN_ORIGINAL_LAYERS, rank=2, alpha=7,
                                    seed=2))


# LTX-2's original names (Lightricks' trainer) and the diffusers layers they became: the renamed
# embeddings and modulations, attention of each stream and across streams, proj_in (split by the
# sequence-parallel plan) and proj_out (gathered by it).
LTX2_ORIGINAL_LAYERS = {
    "patchify_proj": "proj_in", "audio_patchify_proj": "audio_proj_in", "adaln_single.linear": "time_embed.linear",
    "audio_adaln_single.emb.timestep_embedder.linear_1": "audio_time_embed.emb.timestep_embedder.linear_1",
    "av_ca_a2v_gate_adaln_single.linear": "av_cross_attn_video_a2v_gate.linear",
    "av_ca_audio_scale_shift_adaln_single.emb.timestep_embedder.linear_2":
        "av_cross_attn_audio_scale_shift.emb.timestep_embedder.linear_2",
    "transformer_blocks.0.attn1.to_q": "transformer_blocks.0.attn1.to_q",
    "transformer_blocks.1.audio_attn1.to_v": "transformer_blocks.1.audio_attn1.to_v",
    "transformer_blocks.1.audio_to_video_attn.to_k": "transformer_blocks.1.audio_to_video_attn.to_k",
    "transformer_blocks.2.video_to_audio_attn.to_out.0": "transformer_blocks.2.video_to_audio_attn.to_out.0",
    "transformer_blocks.2.ff.net.0.proj": "transformer_blocks.2.ff.net.0.proj", "proj_out": "proj_out",
}


def write_ltx2_adapter(path: Path, model: torch.nn.Module, form: str, rank: int, alpha: float, seed: int) -> Path:
    """One LTX-2 adapter on LTX2_ORIGINAL_LAYERS, the same matrices in every form: "peft" (diffusers'
    keys and metadata), "original" (diffusion_model., lora_down/lora_up, alpha) or "original-ab"
    (diffusion_model., lora_A/lora_B, no alpha keys: alpha = rank, as diffusers' loader reads it)."""
    if form == "peft":
        return write_peft_lora(path, model, list(LTX2_ORIGINAL_LAYERS.values()), rank, alpha, seed)
    parts = ("lora_A", "lora_B") if form == "original-ab" else ("lora_down", "lora_up")
    return write_original_wan_lora(path, model, LTX2_ORIGINAL_LAYERS, rank, alpha if form == "original" else None,
                                   seed, bias=False, parts=parts)


def write_hunyuan_adapter(checkpoint: Path, folder: Path) -> Path:
    """HunyuanVideo's original form on both dual-stream blocks, rank 3."""
    from diffusers import HunyuanVideoTransformer3DModel

    model = HunyuanVideoTransformer3DModel.from_pretrained(checkpoint / "transformer")
    return write_original_hunyuan_lora(folder / "hunyuan-style.safetensors", model, [0, 1], rank=3, seed=7)


def with_adapters(pipe, adapters, scales, into_both: bool = False):
    """diffusers' own way: load_lora_weights per file (adapter a0, a1, ...), then set_adapters."""
    names = [f"a{i}" for i in range(len(adapters))]
    for name, path in zip(names, adapters):
        pipe.load_lora_weights(str(path), adapter_name=name)
        if into_both:
            pipe.load_lora_weights(str(path), adapter_name=name, load_into_transformer_2=True)
    if names:
        pipe.set_adapters(names, list(scales))
    pipe.set_progress_bar_config(disable=True)
    return pipe
