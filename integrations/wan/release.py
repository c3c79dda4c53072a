"""Wan2.1 / Wan2.2 as released: the diffusers configs of Wan-AI's *-Diffusers checkpoints and
parameter counts computed from their dims (never typed in), for the planner's specs and the dry
run's released configs.

Releases (transformer/config.json of each; Wan2.2 A14B has two such transformers, `transformer`
for high noise and `transformer_2` for low noise, switched at boundary_ratio):
  wan-1.3b     Wan2.1-T2V-1.3B   12 heads x 128, 30 layers, ffn 8960, 16 latent channels
  wan-14b      Wan2.1-T2V-14B    40 heads x 128, 40 layers, ffn 13824
  wan-a14b     Wan2.2-T2V-A14B   two of the 14B transformer (boundary_ratio 0.875)
  wan-ti2v-5b  Wan2.2-TI2V-5B    24 heads x 128, 30 layers, ffn 14336, 48 latent channels,
                                 expand_timesteps, the Wan2.2 VAE (16x spatial, patch 2)
Every one cross-attends to 512 UMT5-XXL tokens (text_dim 4096) and runs real classifier-free
guidance (two branches per step). Wan2.1 I2V adds a CLIP ViT-H/14 image encoder (257 tokens,
image_dim 1280) and 36 input channels; its spec is read from a checkpoint (`--model-path`), and
I2V_14B (Wan2.1-I2V-14B-480P/720P's transformer) plans the published I2V cells the validation reads.
Parameter counts follow diffusers 0.42.1's WanTransformer3DModel / AutoencoderKLWan and
transformers' UMT5EncoderModel / CLIPVisionModel layer by layer (tests compare them with the
modules built on the meta device).
"""

from __future__ import annotations

RELEASES = ("wan-1.3b", "wan-14b", "wan-a14b", "wan-ti2v-5b")
TEXT_TOKENS = 512  # WanPipeline's max_sequence_length: the DiT attends to all 512 (padding zeroed)
IMAGE_TOKENS = 257  # CLIP ViT-H/14 at 224 px: 16 x 16 patches + the class token

_TRANSFORMER = {
    "_class_name": "WanTransformer3DModel", "added_kv_proj_dim": None, "attention_head_dim": 128,
    "cross_attn_norm": True, "eps": 1e-06, "freq_dim": 256, "image_dim": None, "in_channels": 16,
    "out_channels": 16, "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024,
    "text_dim": 4096,
}
TRANSFORMERS = {
    "wan-1.3b": {**_TRANSFORMER, "num_attention_heads": 12, "num_layers": 30, "ffn_dim": 8960},
    "wan-14b": {**_TRANSFORMER, "num_attention_heads": 40, "num_layers": 40, "ffn_dim": 13824},
    "wan-a14b": {**_TRANSFORMER, "num_attention_heads": 40, "num_layers": 40, "ffn_dim": 13824},
    "wan-ti2v-5b": {**_TRANSFORMER, "num_attention_heads": 24, "num_layers": 30, "ffn_dim": 14336,
                    "in_channels": 48, "out_channels": 48},
}
# Wan2.1 I2V 14B: the T2V 14B transformer with image cross-attention (CLIP ViT-H features).
I2V_14B = {**TRANSFORMERS["wan-14b"], "in_channels": 36, "image_dim": 1280, "added_kv_proj_dim": 5120}
# AutoencoderKLWan: Wan2.1's VAE (diffusers' defaults) and Wan2.2's (48 channels, residual blocks,
# a 256-wide decoder, 2x2 pixel patches: 16x spatial compression).
VAE_21 = {"_class_name": "AutoencoderKLWan", "base_dim": 96, "decoder_base_dim": None, "z_dim": 16,
          "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [False, True, True],
          "dropout": 0.0, "is_residual": False, "in_channels": 3, "out_channels": 3, "patch_size": None,
          "scale_factor_temporal": 4, "scale_factor_spatial": 8}
VAE_22 = {**VAE_21, "base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "is_residual": True, "in_channels": 12,
          "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16}
VAES = {"wan-1.3b": VAE_21, "wan-14b": VAE_21, "wan-a14b": VAE_21, "wan-ti2v-5b": VAE_22}
UMT5_XXL = {"model_type": "umt5", "architectures": ["UMT5EncoderModel"], "d_model": 4096, "d_ff": 10240, "d_kv": 64,
            "num_heads": 64, "num_layers": 24, "vocab_size": 256384, "feed_forward_proj": "gated-gelu",
            "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
            "tie_word_embeddings": False}
CLIP_VIT_H = {"model_type": "clip_vision_model", "hidden_size": 1280, "intermediate_size": 5120,
              "num_hidden_layers": 32, "num_attention_heads": 16, "image_size": 224, "patch_size": 14,
              "num_channels": 3}
EXPERTS = {"wan-a14b": 2}
BOUNDARY_RATIO = {"wan-a14b": 0.875}
EXPAND_TIMESTEPS = {"wan-ti2v-5b"}
LABELS = {"wan-1.3b": "Wan2.1 T2V 1.3B", "wan-14b": "Wan2.1 T2V 14B", "wan-a14b": "Wan2.2 T2V A14B (2 x 14B)",
          "wan-ti2v-5b": "Wan2.2 TI2V 5B"}


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def transformer_params(config: dict) -> int:
    """WanTransformer3DModel's parameters from its config."""
    d = int(config["num_attention_heads"]) * int(config["attention_head_dim"])
    ffn, freq, text = int(config["ffn_dim"]), int(config.get("freq_dim", 256)), int(config["text_dim"])
    patch = 1
    for p in config["patch_size"]:
        patch *= int(p)
    total = _linear(int(config["in_channels"]) * patch, d)  # patch embedding (a strided Conv3d)
    total += _linear(freq, d) + _linear(d, d) + _linear(d, 6 * d)  # time embedding, its 6 modulations
    total += _linear(text, d) + _linear(d, d)  # text projection
    image, added = config.get("image_dim"), config.get("added_kv_proj_dim")
    if image:  # norm, two-layer MLP, norm
        total += 2 * image + _linear(image, image) + _linear(image, d) + 2 * d
    attention = 4 * _linear(d, d) + 2 * d  # q, k, v, o and the q/k RMS norms across heads
    block = 2 * attention + _linear(d, ffn) + _linear(ffn, d) + 6 * d  # self, cross, FFN, modulation table
    if config.get("cross_attn_norm", True):
        block += 2 * d
    if added:  # image keys and values of the cross-attention, and their norm
        block += 2 * _linear(int(added), d) + d
    total += int(config["num_layers"]) * block
    return total + _linear(d, int(config["out_channels"]) * patch) + 2 * d  # head and its modulation table


def umt5_params(config: dict) -> int:
    """UMT5EncoderModel (every layer has its own relative-position bias)."""
    d, ff, inner = config["d_model"], config["d_ff"], config["d_kv"] * config["num_heads"]
    gated = 3 if config["feed_forward_proj"].startswith("gated") else 2
    layer = 4 * d * inner + config["relative_attention_num_buckets"] * config["num_heads"] + gated * d * ff + 2 * d
    return config["vocab_size"] * d + config["num_layers"] * layer + d


def clip_vision_params(config: dict) -> int:
    """CLIPVisionModel (ViT with pre- and post-layernorm)."""
    d, ff, patch = config["hidden_size"], config["intermediate_size"], config["patch_size"]
    positions = (config["image_size"] // patch) ** 2 + 1
    embeddings = config["num_channels"] * patch * patch * d + d + positions * d
    layer = 4 * _linear(d, d) + _linear(d, ff) + _linear(ff, d) + 4 * d
    return embeddings + 4 * d + config["num_hidden_layers"] * layer


def _conv(cin: int, cout: int, taps: int) -> int:
    return cin * cout * taps + cout


def _resnet(cin: int, cout: int) -> int:
    return cin + _conv(cin, cout, 27) + cout + _conv(cout, cout, 27) + (_conv(cin, cout, 1) if cin != cout else 0)


def _mid(dim: int) -> int:
    return 2 * _resnet(dim, dim) + dim + _conv(dim, 3 * dim, 1) + _conv(dim, dim, 1)


def _resample(dim: int, out: int, temporal: bool, up: bool) -> int:
    if up:
        return _conv(dim, out, 9) + (_conv(dim, 2 * dim, 3) if temporal else 0)
    return _conv(dim, dim, 9) + (_conv(dim, dim, 3) if temporal else 0)


def _encoder_params(vae: dict) -> int:
    base, mult, blocks = vae["base_dim"], vae["dim_mult"], vae["num_res_blocks"]
    dims = [base * m for m in [1, *mult]]
    total = _conv(vae["in_channels"], dims[0], 27)
    for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        for j in range(blocks):
            total += _resnet(cin if j == 0 else cout, cout)
        if i != len(mult) - 1:
            total += _resample(cout, cout, vae["temperal_downsample"][i], up=False)
    return total + _mid(dims[-1]) + dims[-1] + _conv(dims[-1], 2 * vae["z_dim"], 27)


def _decoder_params(vae: dict) -> int:
    base, mult, blocks = vae.get("decoder_base_dim") or vae["base_dim"], vae["dim_mult"], vae["num_res_blocks"]
    residual, ups = vae.get("is_residual", False), vae["temperal_downsample"][::-1]
    dims = [base * m for m in [mult[-1], *mult[::-1]]]
    total = _conv(vae["z_dim"], dims[0], 27) + _mid(dims[0])
    for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        cin = cin // 2 if i > 0 and not residual else cin  # Wan2.1's upsamplers halve the channels
        total += _resnet(cin, cout) + blocks * _resnet(cout, cout)
        if i != len(mult) - 1:
            total += _resample(cout, cout if residual else cout // 2, ups[i], up=True)
    return total + dims[-1] + _conv(dims[-1], vae["out_channels"], 27)


def vae_params(vae: dict) -> int:
    """AutoencoderKLWan: encoder, decoder and the two 1x1 quantisation convolutions."""
    z = vae["z_dim"]
    return _encoder_params(vae) + _decoder_params(vae) + _conv(2 * z, 2 * z, 1) + _conv(z, z, 1)
