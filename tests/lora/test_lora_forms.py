"""LoRA files in the forms trainers write, read by pipedit's own conversion (pipedit.lora.forms),
each against the weights computed by hand from the file: W + scale * alpha/r * B @ A per layer (a
fused original layer's B split by rows into the diffusers layers it became), every diff / diff_b
added as written times the scale. The adapters are merged (fuse) so the model's weights are the
adapted ones. Tolerance 1e-6: float32 weights of size ~1, one matmul and one add apart; a wrong
row, layer or factor moves them by ~0.1. Where diffusers 0.42.1 reads the form too, the merged
weights equal diffusers' (its lora_state_dict + load_lora_adapter + fuse_lora) within the same bound.
"""

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from pipedit.errors import UserInputError
from pipedit.lora.inject import apply_loras
from pipedit.lora.spec import LoraSpec

SCALE, RANK, ALPHA = 0.7, 2, 3.0


def pair(seed: int, fan_in: int, fan_out: int, rank: int = RANK):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rank, fan_in, generator=generator) * 0.3, torch.randn(fan_out, rank, generator=generator) * 0.3


def noise(seed: int, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 0.3


def weights(model) -> dict:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def adapted(model, family: str, path, named: bool = False, fuse: bool = True) -> dict:
    """The model's weights with the file applied by pipedit (merged into the weights)."""
    adapter = SimpleNamespace(components={"transformer": model}, family=family, check_loras=lambda: None)
    spec = LoraSpec(str(path), SCALE)
    if named:
        apply_loras(adapter, named=(("style", spec),))
    else:
        apply_loras(adapter, (spec,), fuse=fuse)
    return weights(model)


def diffusers_merged(model, mixin, path) -> dict:
    state_dict = mixin.lora_state_dict(str(path))
    model.load_lora_adapter(state_dict, prefix="transformer", adapter_name="reference", low_cpu_mem_usage=False)
    model.set_adapters(["reference"], [SCALE])
    model.fuse_lora(adapter_names=["reference"])
    model.unload_lora()
    return weights(model)


def assert_same(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    worst = max((found[k] - expected[k]).abs().max().item() for k in found)
    assert worst <= 1e-6, worst


def low_rank(expected, layer, down, up, alpha=ALPHA, rows=None):
    """expected[layer.weight] += scale * alpha/r * B @ A (B's `rows` only)."""
    b = up if rows is None else up[rows]
    expected[f"{layer}.weight"] += SCALE * alpha / down.shape[0] * b @ down


# -- Wan -----------------------------------------------------------------------------------------
@pytest.fixture
def wan(wan_three_heads):
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel.from_pretrained(wan_three_heads / "transformer")


def test_wan_musubi_file_with_attention_layers_only(wan, tmp_path):
    """musubi-tuner's include patterns: self-attention q and cross-attention o of block 1 only (no
    FFN: diffusers' converter KeyErrors on ffn_0)."""
    (qa, qb), (oa, ob) = pair(1, 24, 24), pair(2, 24, 24)
    save_file({"lora_unet_blocks_0_self_attn_q.lora_down.weight": qa, "lora_unet_blocks_0_self_attn_q.lora_up.weight": qb,
               "lora_unet_blocks_0_self_attn_q.alpha": torch.tensor(ALPHA),
               "lora_unet_blocks_1_cross_attn_o.lora_down.weight": oa, "lora_unet_blocks_1_cross_attn_o.lora_up.weight": ob,
               "lora_unet_blocks_1_cross_attn_o.alpha": torch.tensor(ALPHA)}, str(tmp_path / "musubi.safetensors"))
    expected = weights(wan)
    low_rank(expected, "blocks.0.attn1.to_q", qa, qb)
    low_rank(expected, "blocks.1.attn2.to_out.0", oa, ob)
    assert_same(adapted(wan, "wan", tmp_path / "musubi.safetensors"), expected)


def test_wan_original_keys_with_and_without_the_prefix_equal_hand_weights_and_diffusers(wan, wan_three_heads,
                                                                                       tmp_path):
    from diffusers import WanTransformer3DModel
    from diffusers.loaders import WanLoraLoaderMixin

    (qa, qb), (fa, fb) = pair(3, 24, 24), pair(4, 40, 24)
    bias = noise(5, 24)
    tensors = {"blocks.0.self_attn.q.lora_down.weight": qa, "blocks.0.self_attn.q.lora_up.weight": qb,
               "blocks.0.self_attn.q.alpha": torch.tensor(ALPHA), "blocks.0.self_attn.q.diff_b": bias,
               "blocks.1.ffn.2.lora_down.weight": fa, "blocks.1.ffn.2.lora_up.weight": fb,
               "blocks.1.ffn.2.alpha": torch.tensor(ALPHA)}
    save_file(tensors, str(tmp_path / "bare.safetensors"))
    save_file({f"diffusion_model.{k}": v for k, v in tensors.items()}, str(tmp_path / "prefixed.safetensors"))
    expected = weights(wan)
    low_rank(expected, "blocks.0.attn1.to_q", qa, qb)
    expected["blocks.0.attn1.to_q.bias"] += SCALE * bias
    low_rank(expected, "blocks.1.ffn.net.2", fa, fb)
    assert_same(adapted(wan, "wan", tmp_path / "bare.safetensors"), expected)
    fresh = WanTransformer3DModel.from_pretrained(wan_three_heads / "transformer")
    assert_same(adapted(fresh, "wan", tmp_path / "prefixed.safetensors"), expected)
    reference = WanTransformer3DModel.from_pretrained(wan_three_heads / "transformer")
    assert_same(diffusers_merged(reference, WanLoraLoaderMixin, tmp_path / "prefixed.safetensors"), expected)


def test_wan_lightx2v_diffs_on_norms_and_modulation_are_applied(wan, tmp_path):
    """The lightx2v distill form: a pair with diff_b, and full deltas on the cross-attention norm
    (original norm3 = diffusers norm2), q's RMSNorm, a block's and the head's modulation, the head
    and the text embedding (diffusers drops the norm ones)."""
    (qa, qb) = pair(6, 24, 24)
    deltas = {"blocks.0.norm3.diff": ("blocks.0.norm2.weight", noise(7, 24)),
              "blocks.0.norm3.diff_b": ("blocks.0.norm2.bias", noise(8, 24)),
              "blocks.0.self_attn.norm_q.diff": ("blocks.0.attn1.norm_q.weight", noise(9, 24)),
              "blocks.1.modulation.diff": ("blocks.1.scale_shift_table", noise(10, 1, 6, 24)),
              "head.modulation.diff": ("scale_shift_table", noise(11, 1, 2, 24)),
              "head.head.diff": ("proj_out.weight", noise(12, *wan.proj_out.weight.shape)),
              "head.head.diff_b": ("proj_out.bias", noise(13, wan.proj_out.out_features)),
              "text_embedding.0.diff_b": ("condition_embedder.text_embedder.linear_1.bias", noise(14, 24))}
    tensors = {f"diffusion_model.{k}": v for k, (_, v) in deltas.items()}
    tensors |= {"diffusion_model.blocks.0.self_attn.q.lora_down.weight": qa,
                "diffusion_model.blocks.0.self_attn.q.lora_up.weight": qb,
                "diffusion_model.blocks.0.self_attn.q.alpha": torch.tensor(ALPHA)}
    save_file(tensors, str(tmp_path / "lightx2v.safetensors"))
    expected = weights(wan)
    low_rank(expected, "blocks.0.attn1.to_q", qa, qb)
    for param, delta in deltas.values():
        expected[param] += SCALE * delta
    assert_same(adapted(wan, "wan", tmp_path / "lightx2v.safetensors"), expected)


def test_wan_diff_only_file_changes_the_biases_and_loads_no_adapter(wan, tmp_path):
    deltas = {"text_embedding.0.diff_b": noise(15, 24), "text_embedding.2.diff_b": noise(16, 24)}
    save_file({f"diffusion_model.{k}": v for k, v in deltas.items()}, str(tmp_path / "biases.safetensors"))
    expected = weights(wan)
    expected["condition_embedder.text_embedder.linear_1.bias"] += SCALE * deltas["text_embedding.0.diff_b"]
    expected["condition_embedder.text_embedder.linear_2.bias"] += SCALE * deltas["text_embedding.2.diff_b"]
    assert_same(adapted(wan, "wan", tmp_path / "biases.safetensors", fuse=False), expected)
    assert not getattr(wan, "_hf_peft_config_loaded", False)


def test_full_deltas_are_refused_for_an_adapter_offered_by_name(wan, tmp_path):
    save_file({"diffusion_model.blocks.0.norm3.diff": noise(17, 24)}, str(tmp_path / "norm.safetensors"))
    with pytest.raises(UserInputError, match="offered by name cannot switch"):
        adapted(wan, "wan", tmp_path / "norm.safetensors", named=True)


def test_an_unreadable_key_is_refused_naming_it_and_the_form(wan, tmp_path):
    qa, qb = pair(18, 24, 24)
    save_file({"diffusion_model.blocks.0.self_attn.qq.lora_down.weight": qa,
               "diffusion_model.blocks.0.self_attn.qq.lora_up.weight": qb}, str(tmp_path / "odd.safetensors"))
    with pytest.raises(UserInputError, match=r"key 'diffusion_model\.blocks\.0\.self_attn\.qq\.lora_\w+\.weight' "
                                             r"matches no layer \(the file looks like the original"):
        adapted(wan, "wan", tmp_path / "odd.safetensors")


# -- HunyuanVideo ----------------------------------------------------------------------------------
@pytest.fixture
def hunyuan(demo_checkpoint):
    from diffusers import HunyuanVideoTransformer3DModel

    return HunyuanVideoTransformer3DModel.from_pretrained(demo_checkpoint / "transformer")


def hunyuan_pairs(model):
    """Original fused layers: double block 0's img_attn_qkv, single block 0's linear1 (q, k, v and
    the MLP in one), the final modulation (shift then scale; diffusers holds scale then shift)."""
    inner = model.transformer_blocks[0].attn.to_q.out_features
    mlp = model.single_transformer_blocks[0].proj_mlp.out_features
    return {"double_blocks.0.img_attn_qkv": pair(20, inner, 3 * inner),
            "single_blocks.0.linear1": pair(21, inner, 3 * inner + mlp),
            "final_layer.adaLN_modulation.1": pair(22, inner, 2 * inner)}, inner


def hunyuan_expected(model, pairs, inner):
    expected = weights(model)
    qkv_a, qkv_b = pairs["double_blocks.0.img_attn_qkv"]
    for index, name in enumerate(("to_q", "to_k", "to_v")):
        low_rank(expected, f"transformer_blocks.0.attn.{name}", qkv_a, qkv_b, rows=slice(index * inner, (index + 1) * inner))
    one_a, one_b = pairs["single_blocks.0.linear1"]
    for index, name in enumerate(("attn.to_q", "attn.to_k", "attn.to_v")):
        low_rank(expected, f"single_transformer_blocks.0.{name}", one_a, one_b, rows=slice(index * inner, (index + 1) * inner))
    low_rank(expected, "single_transformer_blocks.0.proj_mlp", one_a, one_b, rows=slice(3 * inner, None))
    mod_a, mod_b = pairs["final_layer.adaLN_modulation.1"]
    low_rank(expected, "norm_out.linear", mod_a, torch.cat([mod_b[inner:], mod_b[:inner]]))
    return expected


@pytest.mark.parametrize("form", ["musubi", "original"])
def test_hunyuan_musubi_and_original_lora_down_up_files(hunyuan, tmp_path, form):
    pairs, inner = hunyuan_pairs(hunyuan)
    tensors = {}
    for layer, (down, up) in pairs.items():
        key = "lora_unet_" + layer.replace(".", "_") if form == "musubi" else f"diffusion_model.{layer}"
        tensors |= {f"{key}.lora_down.weight": down, f"{key}.lora_up.weight": up, f"{key}.alpha": torch.tensor(ALPHA)}
    save_file(tensors, str(tmp_path / f"{form}.safetensors"))
    expected = hunyuan_expected(hunyuan, pairs, inner)
    assert_same(adapted(hunyuan, "hunyuan-video", tmp_path / f"{form}.safetensors"), expected)


def test_hunyuan_original_lora_a_b_file_equals_diffusers(hunyuan, demo_checkpoint, tmp_path):
    from diffusers import HunyuanVideoTransformer3DModel
    from diffusers.loaders import HunyuanVideoLoraLoaderMixin

    from lora_files import write_original_hunyuan_lora

    path = write_original_hunyuan_lora(tmp_path / "original.safetensors", hunyuan, [0, 1], rank=3, seed=23)
    reference = HunyuanVideoTransformer3DModel.from_pretrained(demo_checkpoint / "transformer")
    assert_same(adapted(hunyuan, "hunyuan-video", path), diffusers_merged(reference, HunyuanVideoLoraLoaderMixin, path))


# -- HunyuanVideo 1.5 (no diffusers loader) ---------------------------------------------------------
@pytest.fixture(scope="module")
def hv15_checkpoint(tmp_path_factory):
    from pipedit.integrations.hunyuan_video_15.demo_checkpoint import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("hv15") / "demo")


@pytest.mark.parametrize("form", ["peft", "original"])
def test_hunyuan_video_15_peft_and_original_adapters(hv15_checkpoint, tmp_path, form):
    from diffusers import HunyuanVideo15Transformer3DModel

    model = HunyuanVideo15Transformer3DModel.from_pretrained(hv15_checkpoint / "transformer")
    inner = model.transformer_blocks[0].attn.to_q.out_features
    layers = {"transformer_blocks.0.attn.to_q": ("double_blocks.0.img_attn_q", pair(30, inner, inner)),
              "transformer_blocks.1.attn.add_v_proj": ("double_blocks.1.txt_attn_v", pair(31, inner, inner)),
              "proj_out": ("final_layer.linear", pair(32, inner, model.proj_out.out_features))}
    tensors = {}
    for layer, (original, (down, up)) in layers.items():
        key = f"base_model.model.{layer}" if form == "peft" else f"diffusion_model.{original}"
        tensors |= {f"{key}.lora_A.weight": down, f"{key}.lora_B.weight": up}
        if form == "original":
            tensors[f"{key}.alpha"] = torch.tensor(ALPHA)
    folder = tmp_path / form
    folder.mkdir()
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    if form == "peft":  # peft's save_pretrained writes the alpha beside the weights
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": RANK, "lora_alpha": ALPHA}))
    expected = weights(model)
    for layer, (_, (down, up)) in layers.items():
        low_rank(expected, layer, down, up)
    assert_same(adapted(model, "hunyuan-video-1.5", folder / "adapter_model.safetensors"), expected)
