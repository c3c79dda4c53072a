"""Synthetic HunyuanVideo checkpoints that `pipedit demo-checkpoint --preset NAME` writes.

Each preset names a function returning an in-memory HunyuanVideoPipeline with seeded random
weights; modules are imported only when their preset is used (torch and diffusers are heavy).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipedit.errors import UserInputError

DEFAULT_PRESET = "hunyuan-video-demo"
# name -> (module, builder function, one-line description)
PRESETS: dict[str, tuple[str, str, str]] = {
    "hunyuan-video-demo": (
        "pipedit.integrations.hunyuan_video.demo_checkpoint", "build_demo_pipeline",
        "tiny demo model (~3 MB), the embedded default",
    ),
    "hunyuan-video-full-width": (
        "pipedit.integrations.hunyuan_video.full_width", "build_full_width_pipeline",
        "release widths, 2+2 blocks, released VAE (~3.6 GB)",
    ),
}


def preset_builder(name: str) -> Callable[[], Any]:
    if name not in PRESETS:
        raise UserInputError(f"unknown preset '{name}'; presets: {', '.join(PRESETS)}")
    module, function, _ = PRESETS[name]
    return getattr(importlib.import_module(module), function)


def write_preset(directory: str | os.PathLike, name: str = DEFAULT_PRESET) -> Path:
    """Writes preset `name` to `directory` atomically (see write_pipeline)."""
    from .demo_checkpoint import write_pipeline

    return write_pipeline(directory, preset_builder(name))


def ensure_preset(name: str) -> Path:
    """Preset `name` in the pipedit cache folder, written the first time it is asked for."""
    from pipedit.local_cache import default_cache_dir, ensure_written

    return ensure_written(default_cache_dir() / name, lambda path: write_preset(path, name))


def described() -> tuple[str, dict[str, str]]:
    """(the default preset, {preset: one-line description}), for `demo-checkpoint --help`."""
    return DEFAULT_PRESET, {name: about for name, (_, _, about) in PRESETS.items()}


def ensure_full_width() -> Path:
    """The full-width preset, written the first time: the model `pipedit check-node` runs on a GPU."""
    return ensure_preset("hunyuan-video-full-width")
