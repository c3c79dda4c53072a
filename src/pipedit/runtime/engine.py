"""The engine: turns VideoRequests into VideoResults on the configured ranks.

It drives the workers step by step through an executor (in-process for one rank, Ray actors
for several), so progress is reported per step whatever the executor.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..adapter import adapter_class_for, attention_heads
from ..config import EngineConfig
from ..request import VideoRequest, VideoResult
from .denoise import StepCallback
from .executor import create_executor
from .sequence_parallel import check_parallel_config


def resolve_model_path(path: str | None) -> Path:
    if path:
        return Path(path)
    from pipedit.integrations.hunyuan_video.demo_checkpoint import ensure_demo_checkpoint

    return ensure_demo_checkpoint()


class Engine:
    def __init__(self, config: EngineConfig):
        self.config = config
        model_path = resolve_model_path(config.model.path)
        adapter_class_for(model_path)
        check_parallel_config(config.parallel, attention_heads(model_path))
        self.executor = create_executor(config, str(model_path))

    def generate(self, request: VideoRequest, on_step: StepCallback | None = None,
                 on_phase: Callable[[str], None] | None = None) -> VideoResult:
        notify = on_phase or (lambda phase: None)
        timings: dict[str, float] = {}

        start = time.perf_counter()
        cond = self.executor.call_rank(0, "encode_prompt", request)
        timings["encode_s"] = time.perf_counter() - start

        notify("denoising")
        start = time.perf_counter()
        total = self.executor.call("begin", request, cond)[0]
        for _ in range(total):
            done = self.executor.call("step")[0]
            if on_step is not None:
                on_step(done, total)
        timings["denoise_s"] = time.perf_counter() - start

        notify("decoding")
        start = time.perf_counter()
        result = self.executor.call("finish")[0]
        timings["decode_s"] = time.perf_counter() - start
        result.timings.update(timings)
        return result

    def close(self) -> None:
        self.executor.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
