"""The engine: turns VideoRequests into VideoResults on the configured ranks.

This single-process engine runs text encoding, the denoising loop and decoding on one device.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..adapter import ModelAdapter, load_adapter
from ..config import EngineConfig
from ..request import VideoRequest, VideoResult
from .denoise import StepCallback, denoise


def resolve_model_path(path: str | None) -> Path:
    if path:
        return Path(path)
    from pipedit.integrations.hunyuan_video.demo_checkpoint import ensure_demo_checkpoint

    return ensure_demo_checkpoint()


class Engine:
    def __init__(self, config: EngineConfig, adapter: ModelAdapter | None = None):
        self.config = config
        self.adapter = adapter or load_adapter(
            resolve_model_path(config.model.path),
            device=config.model.torch_device(),
            dtype=config.model.torch_dtype(),
        )

    def validate(self, request: VideoRequest) -> None:
        self.adapter.validate(request.shape, request.steps)

    def generate(self, request: VideoRequest, on_step: StepCallback | None = None,
                 on_phase: Callable[[str], None] | None = None) -> VideoResult:
        self.validate(request)
        timings: dict[str, float] = {}
        notify = on_phase or (lambda phase: None)

        start = time.perf_counter()
        cond = self.adapter.encode_prompt(request.prompt)
        timings["encode_s"] = time.perf_counter() - start

        notify("denoising")
        start = time.perf_counter()
        latents = denoise(self.adapter, request, cond, on_step)
        timings["denoise_s"] = time.perf_counter() - start

        notify("decoding")
        start = time.perf_counter()
        frames = self.adapter.decode(latents)[0]
        timings["decode_s"] = time.perf_counter() - start
        return VideoResult(request.request_id, frames=frames, latents=latents.float().cpu(), timings=timings)


class open_engine:
    """Context manager that builds the engine the config asks for and releases its ranks."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self.engine = None

    def __enter__(self) -> Engine:
        self.engine = Engine(self.config)
        return self.engine

    def __exit__(self, *exc) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()
