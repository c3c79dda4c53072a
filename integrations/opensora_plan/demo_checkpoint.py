"""A tiny offline Open-Sora-Plan v1.3 checkpoint in exactly the official release layout:

    any93x640x640/config.json (with the EMA keys and list-valued sample sizes of the release),
    any93x640x640/diffusion_pytorch_model-0000{1,2}-of-00002.safetensors + index.json,
    vae/config.json + vae/merged.ckpt ({"state_dict": ...} with the Haar constants),
    text_encoder/ (a tiny mT5 encoder and tokenizer, as google/mt5-xxl is published).

Weights are random (seeded): it exercises every code path, it does not draw anything. The
transformer has 6 layers (sparse layers 2..5 with single and group skip) and 2 heads.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipedit.errors import UserInputError

from .checkpoint import DEFAULT_TRANSFORMER_FOLDER, TEXT_ENCODER_FOLDER, TRANSFORMER_CLASS, VAE_FOLDER, WEIGHTS_INDEX
from .transformer import OpenSoraPlanTransformer, TransformerConfig
from .wfvae import WFVAE, WFVAEConfig

DEMO_VERSION = "opensora-plan-demo-v1"
TEXT_DIM = 32
# Fields of the released config.json that the math does not use (EMA bookkeeping, class info).
RELEASE_EXTRA_KEYS = {
    "_class_name": TRANSFORMER_CLASS, "_diffusers_version": "0.30.2", "decay": 0.9999, "min_decay": 0.0,
    "optimization_step": 43000, "update_after_step": 0, "use_ema_warmup": False, "inv_gamma": 1.0, "power": 0.6667,
    "dropout": 0.0, "only_cross_attention": False, "double_self_attention": False, "upcast_attention": False,
}


def demo_transformer_config(num_layers: int = 6, heads: int = 2, head_dim: int = 12, text_dim: int = TEXT_DIM) -> dict:
    return {
        **RELEASE_EXTRA_KEYS,
        "num_attention_heads": heads, "attention_head_dim": head_dim, "in_channels": 8, "out_channels": 8,
        "num_layers": num_layers, "cross_attention_dim": heads * head_dim, "attention_bias": True,
        "sample_size_h": [80, 80], "sample_size_w": [80, 80], "sample_size_t": 24,
        "patch_size": 2, "patch_size_t": 1, "activation_fn": "gelu-approximate", "norm_elementwise_affine": False,
        "norm_eps": 1e-6, "caption_channels": text_dim, "interpolation_scale_h": 1.0, "interpolation_scale_w": 1.0,
        "interpolation_scale_t": 1.0, "sparse1d": True, "sparse_n": 4,
    }


def demo_vae_config(connect_res_layer_num: int = 2) -> dict:
    return {
        "_class_name": "WFVAEModel", "latent_dim": 8, "base_channels": 8, "encoder_num_resblocks": 1,
        "encoder_energy_flow_hidden_size": 8, "decoder_num_resblocks": 1, "decoder_energy_flow_hidden_size": 8,
        "use_attention": True, "norm_type": "layernorm", "t_interpolation": "trilinear",
        "connect_res_layer_num": connect_res_layer_num, "scale": [0.18215] * 8, "shift": [0.0] * 8,
        "dropout": 0.0, "attention_type": "AttnBlock3DFix",
    }


def random_state(module: torch.nn.Module, seed: int, std: float = 0.2) -> dict[str, torch.Tensor]:
    """Seeded random values for every parameter (buffers kept): outputs depend on all weights."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, value in module.state_dict().items():
        if name in dict(module.named_parameters()) and "wavelet_transform" not in name:
            value = torch.randn(value.shape, generator=generator) * std
        state[name] = value.detach().clone().contiguous()
    return state


def write_transformer_folder(folder: Path, config: dict, state: dict[str, torch.Tensor]) -> None:
    """config.json + two safetensors shards + index.json, as the release ships them."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    names = sorted(state)
    half = len(names) // 2
    shards = {"diffusion_pytorch_model-00001-of-00002.safetensors": names[:half],
              "diffusion_pytorch_model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(folder / file))
        weight_map.update({k: file for k in keys})
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / WEIGHTS_INDEX).write_text(json.dumps(index, indent=2))


def write_vae_folder(folder: Path, config: dict, state: dict[str, torch.Tensor], ema: bool = False) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    checkpoint = {"ema_state_dict": {f"module.{k}": v for k, v in state.items()}} if ema else {"state_dict": state}
    torch.save(checkpoint, folder / "merged.ckpt")


def _tokenizer(max_length: int = 512):
    """A Unigram (sentencepiece-style) tokenizer over single characters and a few words, with
    mT5's special tokens (<pad> 0, </s> 1, <unk> 2) and </s> appended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    words = ["▁high", "▁quality", "▁aesthetic", "▁a", "▁the", "▁cat", "▁dog"]
    pieces += [(w, -2.0) for w in words] + [("▁", -3.0)]
    pieces += [(c, -5.0) for c in string.ascii_letters + string.digits + string.punctuation]
    pieces += [("▁" + c, -4.0) for c in string.ascii_lowercase]
    model = Tokenizer(models.Unigram(pieces, unk_id=2, byte_fallback=False))
    model.pre_tokenizer = pre_tokenizers.Metaspace()
    model.decoder = decoders.Metaspace()
    model.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return T5TokenizerFast(tokenizer_object=model, eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                           extra_ids=0, model_max_length=max_length)


def write_text_encoder(folder: Path, seed: int = 2, d_model: int = TEXT_DIM) -> None:
    from transformers import MT5Config, MT5EncoderModel

    tokenizer = _tokenizer()
    config = MT5Config(vocab_size=len(tokenizer), d_model=d_model, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                       relative_attention_num_buckets=8, relative_attention_max_distance=32, dropout_rate=0.0,
                       feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0,
                       pad_token_id=0, eos_token_id=1)
    torch.manual_seed(seed)
    encoder = MT5EncoderModel(config).eval()
    encoder.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def write_demo_checkpoint(directory: str | os.PathLike) -> Path:
    """Writes the demo checkpoint to `directory` (created; atomically: no half-written folder)."""
    target = Path(directory)
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} is not empty; choose a new or empty directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-osp-", dir=target.parent))
    try:
        dit_config = demo_transformer_config()
        dit = OpenSoraPlanTransformer(TransformerConfig.from_dict(dit_config))
        write_transformer_folder(staging / DEFAULT_TRANSFORMER_FOLDER, dit_config, random_state(dit, seed=0, std=0.1))
        vae_config = demo_vae_config()
        vae = WFVAE(WFVAEConfig.from_dict(vae_config))
        write_vae_folder(staging / VAE_FOLDER, vae_config, random_state(vae, seed=1))
        write_text_encoder(staging / TEXT_ENCODER_FOLDER)
        if target.exists():
            target.rmdir()
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def write_demo_cli(directory: str) -> Path:
    try:
        return write_demo_checkpoint(directory)
    except FileExistsError as error:
        raise UserInputError(str(error)) from None


def ensure_demo_checkpoint() -> Path:
    """The default Open-Sora-Plan model (`--model opensora-plan` without --model-path): built
    once into the cache folder, reused afterwards."""
    from pipedit.local_cache import default_cache_dir

    path = default_cache_dir() / DEMO_VERSION
    done = path / VAE_FOLDER / "merged.ckpt"
    if not done.is_file():
        try:
            write_demo_checkpoint(path)
        except OSError:  # another process finished it first (FileExistsError, or its rename won)
            if not done.is_file():
                raise
    return path
