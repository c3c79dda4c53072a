"""Model components built from their configs as fake tensors: nothing is read but config.json.

`fake_loading()` replaces the loaders the adapters call inside the dry run (each family's
pipedit.families entry names its loaders and their fakes, dry_run.fakes): each module is built on
the meta device from its config, then every parameter and buffer becomes a fake tensor of the
requested dtype (fakeworld.materialize). `fake_component` stands in for pipedit.components'
load_component. Tokenizers become `StubTokenizer`: every prompt fills max_length tokens, all valid
(the longest text the DiT can see, as the planner assumes). Schedulers are real (small, config
only). A family whose text encoding or image preprocessing reads values (valid lengths, pixels)
names fakes of its own that give the results' shapes.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ..components import component_kind, library_module
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


def fake_module(build: Callable[[], torch.nn.Module], dtype: torch.dtype | None) -> torch.nn.Module:
    """The module `build()` makes, built on real meta tensors (shapes only, outside the fake mode:
    faster, never counted), then made of fake tensors of `dtype`."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.device("meta"):
        module = build()
    return materialize(module, dtype).requires_grad_(False)


def build_fake(module_class, config, dtype: torch.dtype | None) -> torch.nn.Module:
    """A module of `module_class` from its config (a diffusers dict or a transformers config)."""
    if isinstance(config, dict):
        return fake_module(lambda: module_class.from_config(config), dtype)
    return fake_module(lambda: module_class(config), dtype)


def fake_component(root, index, name, *, dtype=None, device=None):
    library, class_name = index[name]
    folder = Path(root) / name
    component_class = getattr(library_module(library), class_name)
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
