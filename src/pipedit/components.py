"""Loads single components of a diffusers-layout checkpoint, the way DiffusionPipeline does:
model_index.json names the library and class of each sub-folder. Loading one component at a time
lets a rank hold only what its role needs."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import torch

from .errors import ModelPathError

# Files that make a sub-folder loadable, by kind of component.
_CONFIG_FILES = {
    "scheduler": ("scheduler_config.json",),
    "tokenizer": ("tokenizer_config.json", "tokenizer.json", "vocab.json", "tokenizer.model"),
    "processor": ("preprocessor_config.json",),  # image processors (Wan2.1 I2V's CLIPImageProcessor)
}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")


def component_kind(name: str) -> str:
    if name.startswith("tokenizer"):
        return "tokenizer"
    if name.startswith("scheduler"):
        return "scheduler"
    if name.endswith("_processor") or name == "feature_extractor":
        return "processor"
    return "model"


def _check_files(folder: Path, name: str) -> None:
    if not folder.is_dir():
        raise ModelPathError(f"{folder} is missing: model_index.json lists component '{name}'")
    kind = component_kind(name)
    if kind == "model":
        if not (folder / "config.json").is_file():
            raise ModelPathError(f"{folder / 'config.json'} is missing")
        if not any(f.name.endswith(_WEIGHT_SUFFIXES) for f in folder.iterdir()):
            raise ModelPathError(f"{folder} has no weight file (*.safetensors or *.bin)")
    elif not any((folder / f).is_file() for f in _CONFIG_FILES[kind]):
        raise ModelPathError(f"{folder} has none of {', '.join(_CONFIG_FILES[kind])}")


def library_module(library: str):
    """The module model_index.json names: a library (diffusers, transformers), or, as diffusers
    reads it, one of diffusers' pipeline packages holding its own models (LTX-2's "ltx2":
    its connectors and vocoder)."""
    import diffusers.pipelines

    if library not in ("diffusers", "transformers") and hasattr(diffusers.pipelines, library):
        return importlib.import_module(f"diffusers.pipelines.{library}")
    return importlib.import_module(library)


def load_component(root: str | Path, index: dict[str, Any], name: str, *,
                   dtype: torch.dtype | None = None, device: str | torch.device | None = None) -> Any:
    entry = index.get(name)
    if not (isinstance(entry, list) and len(entry) == 2):
        raise ModelPathError(f"{Path(root) / 'model_index.json'} has no component '{name}'")
    library, class_name = entry
    folder = Path(root) / name
    _check_files(folder, name)
    component_class = getattr(library_module(library), class_name, None)
    if component_class is None:
        raise ModelPathError(f"{library} has no class {class_name} (named for '{name}' in model_index.json)")
    if component_kind(name) != "model":
        return component_class.from_pretrained(folder)
    target = torch.device(device) if device is not None else None
    options = {}
    if target is not None and target.type == "cuda":
        # Weights go from the (memory-mapped) safetensors file to the GPU tensor by tensor, never
        # as a whole host copy: 7 ranks each reading a 26 GB DiT into RAM first would not fit.
        options["device_map"] = {"": target}
    module = component_class.from_pretrained(folder, torch_dtype=dtype, **options)
    module.requires_grad_(False)
    module.eval()
    return module.to(target) if target is not None and "device_map" not in options else module


def read_component_config(root: str | Path, name: str) -> dict[str, Any]:
    """A model component's config.json, without loading its weights."""
    file = Path(root) / name / "config.json"
    try:
        return json.loads(file.read_text())
    except OSError:
        raise ModelPathError(f"{file} is missing") from None
    except json.JSONDecodeError as error:
        raise ModelPathError(f"{file} is not valid JSON ({error})") from error
