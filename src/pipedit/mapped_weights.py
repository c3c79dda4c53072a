"""A checkpoint folder's weights as tensors that view its memory-mapped safetensors files.

The pages are the files' own (read-only private mappings): every process that maps the same file
shares one copy through the page cache, and a tensor here costs no anonymous host memory. An
offloaded module points its parameters at these views (no copy out) and copies them to the
device when it is needed again (a two-expert family's idle expert).

The views are never written: a write would give the writing process a private copy of the page
(copy-on-write), not change the file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_SINGLE = "diffusion_pytorch_model.safetensors"
_INDEX = "diffusion_pytorch_model.safetensors.index.json"


def checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of a diffusers model folder (one file, or the shards its index
    names); empty when it has none (a .bin checkpoint)."""
    if (folder / _INDEX).is_file():
        shards = json.loads((folder / _INDEX).read_text())["weight_map"].values()
        return [folder / name for name in sorted(set(shards))]
    return [folder / _SINGLE] if (folder / _SINGLE).is_file() else []


def map_file(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file, as a view of the file's mapping; None for a tensor
    whose offset does not suit its dtype's alignment (mapped() then reports the folder unusable)."""
    with path.open("rb") as file:
        (header_bytes,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_bytes))
    size = path.stat().st_size
    data = torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8)  # a private mapping
    start = 8 + header_bytes
    views = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(entry["dtype"])
        begin, end = entry["data_offsets"]
        if dtype is None or (start + begin) % dtype.itemsize:
            views[name] = None
            continue
        views[name] = data[start + begin:start + end].view(dtype).reshape(entry["shape"])
    return views


def mapped(folder: Path, module: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """{parameter or buffer name: its mapped view} for every tensor of `module`'s state dict, or
    None when the folder cannot stand in for the module's weights (no safetensors files, a name or
    shape it lacks, a dtype or alignment a view cannot take): the caller copies instead."""
    views: dict[str, torch.Tensor | None] = {}
    for path in checkpoint_files(folder):
        views.update(map_file(path))
    wanted = module.state_dict()
    found = {}
    for name, tensor in wanted.items():
        view = views.get(name)
        if view is None or view.shape != tensor.shape:
            return None
        found[name] = view
    return found
