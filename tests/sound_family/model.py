"""The sound family's adapter: HunyuanVideo's, plus a sound track that follows the latents (equal
latents give an equal track), and a note in the checkpoint folder of each rank that decoded one."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from pipedit.integrations.hunyuan_video import planner as hunyuan_planner
from pipedit.integrations.hunyuan_video.adapter import HunyuanVideoAdapter
from pipedit.integrations.hunyuan_video.demo_checkpoint import write_demo_checkpoint as write_hunyuan_demo
from pipedit.local_cache import default_cache_dir, ensure_written
from pipedit.sound import Soundtrack

from .family import NAME, PIPELINE

RATE = 16000


def latents_sound(latents: torch.Tensor) -> Soundtrack:
    """Half a second of a stereo tone whose loudness is the latents' mean magnitude."""
    t = torch.arange(RATE // 2) / RATE
    loudness = latents.detach().float().abs().mean().clamp(max=1.0).cpu()
    return Soundtrack(loudness * torch.stack([torch.sin(2 * math.pi * 440 * t), torch.sin(2 * math.pi * 880 * t)]),
                      RATE)


class SoundVideoAdapter(HunyuanVideoAdapter):
    family = NAME
    capabilities = replace(HunyuanVideoAdapter.capabilities, has_sound=True)

    @classmethod
    def from_pretrained(cls, path, **options):
        adapter = super().from_pretrained(path, **options)
        adapter.notes = Path(path)
        return adapter

    def encode_prompt(self, prompt: str, shape=None):
        # A model with sound is given the video's shape with every prompt; HunyuanVideo needs none.
        return super().encode_prompt(prompt)

    def decode_sound(self, latents: torch.Tensor, shape) -> Soundtrack:
        rank = dist.get_rank() if dist.is_initialized() else 0
        (self.notes / f"sound-decoded-by-rank-{rank}").touch()
        return latents_sound(latents)


def write_demo_checkpoint(directory, preset=None) -> Path:
    root = write_hunyuan_demo(directory)
    index = root / "model_index.json"
    index.write_text(json.dumps({**json.loads(index.read_text()), "_class_name": PIPELINE}))
    return root


def ensure_demo_checkpoint() -> Path:
    return ensure_written(default_cache_dir() / "sound-video-demo", write_demo_checkpoint)


SIZES = {NAME: lambda: replace(hunyuan_planner.hunyuan_video(), name="Sound video (13B)", family=NAME)}


def from_checkpoint(root: Path):
    return replace(hunyuan_planner.from_checkpoint(root), family=NAME)
