"""One prompt to one mp4: what `pipedit generate` does."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tqdm import tqdm

from ..config import EngineConfig
from ..errors import UserInputError
from ..fields import request_fields
from ..request import RequestEvent, RequestStatus, VideoRequest
from ..video import write_mp4
from .inputs import config_checker, read_image_file


def request_from_config(config: EngineConfig, prompt: str, **values) -> VideoRequest:
    """The config's generation defaults, `values` (request fields such as negative_prompt, image)
    over them."""
    defaults = {spec.name: getattr(config.generation, spec.name) for spec in request_fields() if spec.in_config}
    return VideoRequest(prompt=prompt, **defaults, **values)


def _check_output(output: Path) -> None:
    if output.suffix.lower() != ".mp4":
        raise UserInputError(f"--output must end in .mp4, got {output}")
    if output.is_dir():
        raise UserInputError(f"--output {output} is a directory; give a file path ending in .mp4")


def _show(bar: tqdm, event: RequestEvent) -> None:
    if event.status is RequestStatus.DENOISING:
        bar.update(event.step - bar.n)
    elif event.status is RequestStatus.DECODING:
        bar.close()


def _saved_latents(config: EngineConfig, latents: torch.Tensor, request: VideoRequest):
    """The model's own form of its final latents (AdapterHooks.saved_latents), from its configs."""
    from ..adapter import model_inputs
    from ..runtime.engine import resolve_model_path

    adapter = model_inputs(resolve_model_path(config.model.path, config.model.name), config.model.name)
    return adapter.saved_latents(latents, request.shape)


def generate_to_file(config: EngineConfig, prompt: str, output: Path, latents_path: str | None = None, *,
                     image_path: Path | None = None, **values) -> Path:
    """Everything the user gave is checked before any weights load: the output name, the image
    file, the request, and what the model takes (its configs only). `values`: request fields
    that have no config default (negative_prompt)."""
    _check_output(output)
    image = read_image_file(image_path, "--image") if image_path is not None else None
    request = request_from_config(config, prompt, image=image, **values)
    config_checker(config)(request.field_values())
    from ..runtime.engine import Engine

    with Engine(config) as engine:
        with tqdm(total=request.steps, desc="denoising", unit="step", file=sys.stderr) as bar:
            result = engine.generate(request, on_event=lambda event: _show(bar, event))
    if latents_path:
        Path(latents_path).parent.mkdir(parents=True, exist_ok=True)
        torch.save(_saved_latents(config, result.latents, request), latents_path)
    return write_mp4(result.frames, output, fps=config.generation.fps, sound=result.sound)
