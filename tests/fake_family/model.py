"""The fake family's code: HunyuanVideo's adapter, planner spec and checkpoints under its own names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pipedit.integrations.hunyuan_video import planner as hunyuan_planner
from pipedit.integrations.hunyuan_video.adapter import HunyuanVideoAdapter
from pipedit.integrations.hunyuan_video.demo_checkpoint import write_demo_checkpoint as write_hunyuan_demo
from pipedit.integrations.hunyuan_video.released import write_release as write_hunyuan_release
from pipedit.local_cache import default_cache_dir, ensure_written

from .family import NAME, PIPELINE


class FakeVideoAdapter(HunyuanVideoAdapter):
    family = NAME


def _renamed(root: Path) -> Path:
    index = root / "model_index.json"
    index.write_text(json.dumps({**json.loads(index.read_text()), "_class_name": PIPELINE}))
    return root


def write_demo_checkpoint(directory, preset=None) -> Path:
    return _renamed(write_hunyuan_demo(directory))


def ensure_demo_checkpoint() -> Path:
    return ensure_written(default_cache_dir() / "fake-video-demo", write_demo_checkpoint)


def write_release(release: str, root: Path) -> Path:
    return _renamed(write_hunyuan_release(release, root))


SIZES = {NAME: lambda: replace(hunyuan_planner.hunyuan_video(), name="Fake video (13B)", family=NAME)}


def from_checkpoint(root: Path):
    return replace(hunyuan_planner.from_checkpoint(root), family=NAME)
