"""Reading the official Open-Sora-Plan v1.3 release layout.

    DIR/any93x640x640/config.json                       OpenSoraT2V_v1_3 config (may carry EMA keys)
    DIR/any93x640x640/diffusion_pytorch_model*.safetensors (+ .safetensors.index.json when sharded)
    DIR/vae/config.json + DIR/vae/merged.ckpt           WFVAE
The text encoder (google/mt5-xxl layout) is a separate folder: --text-encoder-path, else DIR/text_encoder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from pipedit.errors import ModelPathError

TRANSFORMER_CLASS = "OpenSoraT2V_v1_3"
DEFAULT_TRANSFORMER_FOLDER = "any93x640x640"
VAE_FOLDER = "vae"
TEXT_ENCODER_FOLDER = "text_encoder"
WEIGHTS_INDEX = "diffusion_pytorch_model.safetensors.index.json"
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"


def read_json(file: Path) -> dict:
    try:
        data = json.loads(file.read_text())
    except OSError:
        raise ModelPathError(f"{file} is missing") from None
    except json.JSONDecodeError as error:
        raise ModelPathError(f"{file} is not valid JSON ({error})") from error
    if not isinstance(data, dict):
        raise ModelPathError(f"{file} must hold a JSON object")
    return data


def _is_transformer_folder(folder: Path) -> bool:
    file = folder / "config.json"
    if not file.is_file():
        return False
    try:
        return json.loads(file.read_text()).get("_class_name") == TRANSFORMER_CLASS
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def transformer_folders(root: Path) -> list[Path]:
    """Sub-folders of `root` holding an OpenSoraT2V_v1_3 config."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _is_transformer_folder(p))


def is_official_layout(root: str | Path) -> bool:
    root = Path(root)
    return (root / VAE_FOLDER / "config.json").is_file() and bool(transformer_folders(root))


def find_transformer_folder(root: str | Path) -> Path:
    """any93x640x640/ when present, else the one folder with an OpenSoraT2V_v1_3 config."""
    root = Path(root)
    if not root.is_dir():
        raise ModelPathError(f"model path {root} does not exist or is not a directory")
    preferred = root / DEFAULT_TRANSFORMER_FOLDER
    if _is_transformer_folder(preferred):
        return preferred
    found = transformer_folders(root)
    if len(found) == 1:
        return found[0]
    if not found:
        raise ModelPathError(f"{root} holds no transformer folder: expected {DEFAULT_TRANSFORMER_FOLDER}/ (or "
                             f"another folder whose config.json has _class_name {TRANSFORMER_CLASS})")
    raise ModelPathError(f"{root} holds several {TRANSFORMER_CLASS} folders ({', '.join(p.name for p in found)}) "
                         f"and no {DEFAULT_TRANSFORMER_FOLDER}/: keep one")


def load_transformer_state(folder: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The state dict of a (possibly sharded) safetensors transformer folder, keys unchanged."""
    index_file = folder / WEIGHTS_INDEX
    if index_file.is_file():
        weight_map = read_json(index_file).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ModelPathError(f"{index_file} has no weight_map")
        shards = sorted(set(weight_map.values()))
    elif (folder / WEIGHTS_FILE).is_file():
        shards = [WEIGHTS_FILE]
    else:
        raise ModelPathError(f"{folder} has neither {WEIGHTS_INDEX} nor {WEIGHTS_FILE}")
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        file = folder / shard
        if not file.is_file():
            raise ModelPathError(f"{file} is missing (listed in {index_file.name})")
        state.update(load_file(str(file), device=str(device)))
    return state


def load_module_state(module: torch.nn.Module, state: dict[str, torch.Tensor], source: Path,
                      optional_prefixes: tuple[str, ...] = ()) -> None:
    """Strict load, except keys under `optional_prefixes` may be missing (fixed constants the
    module already holds). Errors name the first offending keys."""
    result = module.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not any(p in k for p in optional_prefixes)]
    if missing or result.unexpected_keys:
        raise ModelPathError(
            f"{source} does not match the model built from its config: "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {result.unexpected_keys[:5]}{'...' if len(result.unexpected_keys) > 5 else ''}"
        )
