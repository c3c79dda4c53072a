"""A checkpoint folder's weights as tensors that view its memory-mapped safetensors files.

The pages are the files' own (read-only private mappings): every process that maps the same file
shares one copy through the page cache, and a tensor here costs no anonymous host memory. An
offloaded module points its parameters at these views (no copy out) and copies them to the
device when it is needed again (a two-expert family's idle expert).

The views are never written: a write would give the writing process a private copy of the page
(copy-on-write), not change the file.

The views hold the files' dtype, whatever the module computes in: a float32 checkpoint under a
bf16 module maps (and copies to the device at every swap) twice the module's bytes, so host
memory and swap volumes are counted in file bytes (checkpoint_bytes).
"""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_log = logging.getLogger(__name__)
_SINGLE = "diffusion_pytorch_model.safetensors"
_INDEX = "diffusion_pytorch_model.safetensors.index.json"


def checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of a diffusers model folder (one file, or the shards its index
    names); empty when it has none (a .bin checkpoint)."""
    if (folder / _INDEX).is_file():
        shards = json.loads((folder / _INDEX).read_text())["weight_map"].values()
        return [folder / name for name in sorted(set(shards))]
    return [folder / _SINGLE] if (folder / _SINGLE).is_file() else []


def _header(path: Path) -> tuple[int, dict]:
    with path.open("rb") as file:
        (header_bytes,) = struct.unpack("<Q", file.read(8))
        return header_bytes, json.loads(file.read(header_bytes))


def checkpoint_bytes(folder: Path) -> int | None:
    """The bytes of the tensors a model folder's safetensors files hold, in the files' own dtypes
    (read from their headers: no weight is read); None without safetensors files."""
    files = checkpoint_files(folder)
    if not files:
        return None
    total = 0
    for path in files:
        total += sum(end - begin for name, entry in _header(path)[1].items() if name != "__metadata__"
                     for begin, end in [entry["data_offsets"]])
    return total


def read_ahead(folder: Path) -> list[Path]:
    """Asks the kernel to read a model folder's safetensors files into the page cache now, in the
    background (posix_fadvise WILLNEED: the call queues the reads and returns), so that the first
    time the mapped views are copied (an offloaded expert's first swap) their pages come from
    memory instead of the disk or a network folder inside a denoise step. Returns the files
    advised (none where the platform has no posix_fadvise).

    Hazard, page cache pressure: the files are read whole (a 14B expert: 26.6 GiB in bf16, 53 GiB
    in float32). Without that much free host memory the kernel evicts other cached pages to make
    room (other models' files, or these very pages before they are used: then the swap reads the
    disk after all) and the readahead only costs disk bandwidth; it never pins memory, nor fails
    a load. Every rank of a node advises the same files: pages already cached are not read again."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return []
    advised = []
    for path in checkpoint_files(folder):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            advise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)  # length 0: to the end of the file
            advised.append(path)
        except OSError as error:  # a file system without readahead: the first swap reads it then
            _log.warning("no readahead of %s (%s)", path, error)
        finally:
            os.close(descriptor)
    return advised


def map_file(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file, as a view of the file's mapping; None for a tensor
    whose offset does not suit its dtype's alignment (mapped() then reports the folder unusable)."""
    header_bytes, header = _header(path)
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
