"""Model components built from their configs as fake tensors: nothing is read but config.json.

`fake_loading()` replaces the loaders the adapters call (HunyuanVideo and Wan: pipedit.components'
load_component; OpenSoraPlan: its transformer, WFVAE and mT5 loaders) inside the dry run: each
module is built on the meta device from its config, then every parameter and buffer becomes a
fake tensor of the requested dtype (fakeworld.materialize). Tokenizers become `StubTokenizer`:
every prompt fills max_length tokens, all valid (the longest text the DiT can see, as the
planner assumes). Schedulers are real (small, config only). Wan's text encoding reads the valid
length from the mask (a value): `fake_umt5_encode` stands in for it, with every token valid (its
result then has the same shape and holds the same storages, less the zero-padding copy). Wan's
image preprocessing reads pixels: `fake_first_frame_video` gives its result's shape.

`released_checkpoint(model, folder)` writes the released models' configs (no weights) in the
layout the adapters read, for when no --model-path is given.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path

import torch

from ..components import component_kind
from .fakeworld import materialize


class _Tokens(dict):
    __getattr__ = dict.__getitem__


class StubTokenizer:
    """Answers like a Hugging Face tokenizer: max_length ids, every token valid. The mask is a
    real tensor (host data the adapters read values of, e.g. the valid text length)."""

    def __init__(self, max_length: int = 512) -> None:
        self.model_max_length = max_length

    def __call__(self, texts, max_length=None, **_) -> _Tokens:
        length = max_length or self.model_max_length
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            ids = torch.zeros((len(texts), length), dtype=torch.long)
            mask = torch.ones((len(texts), length), dtype=torch.long)
        return _Tokens(input_ids=ids, attention_mask=mask)


@contextlib.contextmanager
def _meta() -> Iterator[None]:
    """Real meta tensors (shapes only, outside the fake mode: faster, never counted)."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.device("meta"):
        yield


def build_fake(module_class, config, dtype: torch.dtype | None) -> torch.nn.Module:
    """A module of `module_class` from its config (a diffusers dict or a transformers config)."""
    with _meta():
        if isinstance(config, dict):
            module = module_class.from_config(config)
        else:
            module = module_class(config)
    return materialize(module, dtype).requires_grad_(False)


def fake_component(root, index, name, *, dtype=None, device=None):
    library, class_name = index[name]
    folder = Path(root) / name
    component_class = getattr(importlib.import_module(library), class_name)
    kind = component_kind(name)
    if kind == "tokenizer":
        return StubTokenizer()
    # Real and small, from config files alone: schedulers (host data: sigma tables whose values
    # it reads, .item()) and image processors (resize and normalise constants).
    if kind in ("scheduler", "processor"):
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            return component_class.from_pretrained(folder)
    if library == "transformers":
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(folder)
        if hasattr(config, "text_config") and "CLIPText" in class_name:
            config = config.text_config
        return build_fake(component_class, config, dtype or getattr(config, "dtype", None))
    return build_fake(component_class, component_class.load_config(folder), dtype)


def fake_osp_transformer(folder, dtype=None, device="cpu"):
    from pipedit.integrations.opensora_plan.checkpoint import read_json
    from pipedit.integrations.opensora_plan.transformer import OpenSoraPlanTransformer, TransformerConfig

    config = TransformerConfig.from_dict(read_json(Path(folder) / "config.json"))
    with _meta():
        module = OpenSoraPlanTransformer(config)
    return materialize(module, dtype or torch.float32).requires_grad_(False)


def fake_wfvae(folder, dtype=None, device="cpu", with_encoder=True):
    from pipedit.integrations.opensora_plan.checkpoint import read_json
    from pipedit.integrations.opensora_plan.wfvae import WFVAE, WFVAEConfig

    config = WFVAEConfig.from_dict(read_json(Path(folder) / "config.json"))
    with _meta():
        module = WFVAE(config, with_encoder)
    return materialize(module, dtype or torch.float32).requires_grad_(False)


def fake_mt5_encoder(folder, dtype, device):
    from transformers import AutoConfig, MT5EncoderModel

    config = AutoConfig.from_pretrained(folder)
    return StubTokenizer(), build_fake(MT5EncoderModel, config, dtype)


def fake_umt5_encode(tokenizer, text_encoder, prompt, device, max_tokens=512):
    tokens = tokenizer([prompt], max_length=max_tokens)
    states = text_encoder(tokens.input_ids, tokens.attention_mask).last_hidden_state
    return states.to(device=device, dtype=text_encoder.dtype)


def fake_first_frame_video(image, shape, spatial_ratio, frames):
    """Wan's image condition before the VAE: the resized image's pixels, then zero frames. The
    preprocessing reads pixel values (host data); only the shape and dtype matter here."""
    return torch.empty(1, 3, frames, shape.height, shape.width, dtype=torch.float32)


@contextlib.contextmanager
def fake_loading() -> Iterator[None]:
    """Every adapter loader builds fake modules from configs while this is active (each family's
    pipedit.families entry names its loaders and their fakes)."""
    from pipedit import families

    patches = []
    for entry in families.families():
        for target, replacement in entry.dry_run.fakes:
            module_name, _, name = target.partition(":")
            patches.append((importlib.import_module(module_name), name, families.load(replacement)))
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, replacement in patches:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
