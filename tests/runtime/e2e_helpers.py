"""Shared by the end-to-end parity tests: one request's final latents, computed on one in-process
device (the reference) or through `pipedit generate` with parallel flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from pipedit.cli import main
from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine


@dataclass(frozen=True)
class Case:
    prompt: str
    height: int
    width: int
    frames: int
    steps: int
    seed: int


def single_device_latents(checkpoint: Path, case: Case) -> torch.Tensor:
    request = VideoRequest(case.prompt, height=case.height, width=case.width, num_frames=case.frames,
                           steps=case.steps, seed=case.seed)
    with Engine(EngineConfig(model=ModelConfig(path=str(checkpoint)))) as engine:
        return engine.generate(request).latents


def generated_latents(checkpoint: Path, tmp_path: Path, case: Case, flags: list[str]) -> torch.Tensor:
    latents_file = tmp_path / "latents.pt"
    code = main([
        "generate", "--prompt", case.prompt, "--model-path", str(checkpoint), "--height", str(case.height),
        "--width", str(case.width), "--num-frames", str(case.frames), "--steps", str(case.steps),
        "--seed", str(case.seed), "--output", str(tmp_path / "out.mp4"), "--save-latents", str(latents_file), *flags,
    ])
    assert code == 0
    return torch.load(latents_file)
