"""Rendering in this process: the engine loop on the configured ranks.

Every pending line is submitted up front, so the scheduler pipelines across the whole file
(DeDiVAE: line k decodes while line k+1 denoises). Outcomes arrive on the engine's loop
thread and are handed to the calling thread through a queue; only the calling thread writes
files and touches the batch (see batch.py).
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from ..config import EngineConfig
from ..errors import UserInputError
from ..fields import request_fields
from ..request import RequestEvent, RequestFailure, RequestStatus, VideoRequest
from ..video import VideoWriteError, write_mp4
from .batch import Batch
from .inputs import line_image
from .prompts import RenderLine, Validator

PROGRESS_EVERY_S = 0.2


def model_identity(config: EngineConfig) -> str:
    """The model part of a line's key: the checkpoint's absolute path, or the demo model, and
    the run's LoRA adapters (files, scales, experts; fused or not only moves float rounding, so
    it is left out). Without adapters the identity is what it was before they existed."""
    model = config.model
    if model.path:
        from ..hub import hub_id

        identity = model.path if hub_id(model.path) is not None else str(Path(model.path).resolve())
    else:
        identity = f"pipedit-demo-{model.name}" if model.name else "pipedit-demo"
    if model.run_loras:
        identity += " lora=" + ",".join(spec.identity() for spec in model.run_loras)
    return identity


def line_validator(config: EngineConfig) -> Validator:
    """The model adapter's own checks on a line's resolved settings: its shapes, and whether it
    takes the line's negative prompt and image (pipedit.adapter.check_inputs; no weights load)."""
    from .inputs import config_checker

    return config_checker(config)


def request_for(line: RenderLine) -> VideoRequest:
    """UserInputError when the line's image changed since the prompts file was read (its key
    and manifest entry describe the image read then)."""
    values = {spec.name: line.settings.get(spec.name) for spec in request_fields()}
    return VideoRequest(**dict(values, image=line_image(line.settings)))


class LocalRunner:
    def __init__(self, config: EngineConfig):
        self.config = config

    def __call__(self, lines: list[RenderLine], out_dir: Path, batch: Batch) -> None:
        from ..runtime.engine_loop import EngineLoop

        outcomes: queue.Queue = queue.Queue()
        latest: dict[str, RequestEvent] = {}  # request id -> its newest event (written by the loop thread)
        started: dict[str, float] = {}
        lock = threading.Lock()

        def listen(event: RequestEvent) -> None:
            with lock:
                latest[event.request_id] = event
                if event.status is RequestStatus.ENCODING:
                    started.setdefault(event.request_id, time.perf_counter())

        with EngineLoop.from_config(self.config, on_outcome=outcomes.put) as core:
            core.add_listener(listen)
            by_id: dict[str, RenderLine] = {}
            for line in lines:
                try:
                    by_id[core.submit(request_for(line))] = line
                except UserInputError as error:
                    batch.finished(line, error=str(error))
            submitted = time.perf_counter()
            while by_id:
                try:
                    outcome = outcomes.get(timeout=PROGRESS_EVERY_S)
                except queue.Empty:
                    self._show_step(batch, by_id, latest, lock)
                    continue
                line = by_id.pop(outcome.request_id)
                with lock:
                    began = started.get(outcome.request_id, submitted)
                self._finish(batch, line, outcome, out_dir, began)

    @staticmethod
    def _show_step(batch: Batch, by_id: dict, latest: dict, lock: threading.Lock) -> None:
        with lock:
            denoising = [e for e in latest.values() if e.status is RequestStatus.DENOISING and e.request_id in by_id]
        if denoising:
            event = max(denoising, key=lambda e: e.at)
            batch.step(by_id[event.request_id], event.step, event.total_steps)

    def _finish(self, batch: Batch, line: RenderLine, outcome, out_dir: Path, began: float) -> None:
        if isinstance(outcome, RequestFailure):
            batch.finished(line, error=outcome.message)
            return
        try:
            write_mp4(outcome.frames, out_dir / line.file_name, fps=line.settings["fps"], sound=outcome.sound)
        except VideoWriteError as error:  # nothing under the final name; a full disk stops the run
            batch.write_failed(line, error)
            return
        batch.finished(line, timings=outcome.timings, latency_s=time.perf_counter() - began)
