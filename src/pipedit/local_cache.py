"""This machine's pipedit cache folder: demo checkpoints, calibrations and the server's data live
under it unless configured elsewhere."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def default_cache_dir() -> Path:
    """$PIPEDIT_CACHE, else $XDG_CACHE_HOME/pipedit, else ~/.cache/pipedit."""
    root = os.environ.get("PIPEDIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pipedit"
    )
    return Path(root)


def ensure_written(path: Path, write: Callable[[Path], Any]) -> Path:
    """`path` holding a checkpoint: written by `write(path)` the first time, reused afterwards."""
    if not (path / "model_index.json").exists():
        try:
            write(path)
        except FileExistsError:  # another process finished it first
            pass
    return path
