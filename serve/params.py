"""Turns the client's create parameters into complete, checked generation settings.

Everything is checked here, before the engine sees the job: a job the store accepts must be
one the engine can run (the model's own rules come from its adapter's `validate`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from pipedit.adapter import VideoShape
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError

from .errors import ApiError, invalid
from .schemas import VideoCreateParams

ShapeValidator = Callable[[VideoShape, int], None]  # raises UserInputError naming what is allowed
_SIZE = re.compile(r"^\s*(\d{1,5})\s*[xX]\s*(\d{1,5})\s*$")


@dataclass(frozen=True)
class ServiceLimits:
    max_queued: int = 16  # queued jobs beyond this get 429
    max_queued_per_key: int = 8  # queued jobs of one API key beyond this get 429 (when keys are set)
    max_cost: int = 1280 * 720 * 129 * 50  # height x width x num_frames x steps of one request
    max_steps: int = 100
    max_guidance_scale: float = 30.0
    max_prompt_chars: int = 4000
    max_side: int = 1920  # pixels, either dimension
    max_frames: int = 257
    max_fps: int = 60


@dataclass(frozen=True)
class JobSettings:
    """What a job runs with; stored as the job's `params`."""

    prompt: str
    width: int
    height: int
    num_frames: int
    fps: int
    num_inference_steps: int
    guidance_scale: float
    seed: int
    seconds: str

    def to_json(self) -> dict:
        return asdict(self)


def resolve(params: VideoCreateParams, model_name: str, defaults: GenerationDefaults, limits: ServiceLimits,
            validate: ShapeValidator | None = None) -> JobSettings:
    given = params.given()
    _check_model(given.get("model"), model_name)
    prompt = _check_prompt(params.prompt, limits)
    if given.get("negative_prompt", "").strip():
        raise invalid(f"negative_prompt is not supported by {model_name} (it uses embedded guidance); "
                      f"leave it out", "negative_prompt", "unsupported_parameter")
    width, height = _size(given["size"], limits) if "size" in given else (defaults.width, defaults.height)
    fps = _bounded_int(given.get("fps", defaults.fps), "fps", 1, limits.max_fps)
    frames, seconds = _frames(given, fps, defaults, limits)
    steps = _bounded_int(given.get("num_inference_steps", defaults.steps), "num_inference_steps", 1, limits.max_steps)
    guidance = float(given.get("guidance_scale", defaults.guidance_scale))
    if not 0.0 <= guidance <= limits.max_guidance_scale:
        raise invalid(f"guidance_scale must be between 0 and {limits.max_guidance_scale}, got {guidance}",
                      "guidance_scale")
    seed = _bounded_int(given.get("seed", defaults.seed), "seed", 0, 2**63 - 1)
    _check_cost(width, height, frames, steps, limits)
    _check_shape(validate, VideoShape(height, width, frames), steps)
    return JobSettings(prompt, width, height, frames, fps, steps, guidance, seed, seconds)


def _check_model(model: str | None, model_name: str) -> None:
    if model is not None and model != model_name:
        raise ApiError(400, f"model '{model}' is not served here; use '{model_name}' or leave model out",
                       param="model", code="model_not_found")


def _check_prompt(prompt: str, limits: ServiceLimits) -> str:
    if not prompt.strip():
        raise invalid("prompt must not be empty: describe the video to generate", "prompt", "empty_prompt")
    if len(prompt) > limits.max_prompt_chars:
        raise invalid(f"prompt has {len(prompt)} characters; at most {limits.max_prompt_chars} are allowed",
                      "prompt", "prompt_too_long")
    return prompt


def _size(text: str, limits: ServiceLimits) -> tuple[int, int]:
    match = _SIZE.match(text)
    if match is None:
        raise invalid(f"size must be WIDTHxHEIGHT in pixels, e.g. 128x128; got {text!r}", "size")
    width, height = int(match[1]), int(match[2])
    if not (1 <= width <= limits.max_side and 1 <= height <= limits.max_side):
        raise invalid(f"width and height must be between 1 and {limits.max_side}, got {text}", "size")
    return width, height


def _frames(given: dict, fps: int, defaults: GenerationDefaults, limits: ServiceLimits) -> tuple[int, str]:
    """num_frames and the clip length in seconds (as the string OpenAI's API uses)."""
    seconds = _seconds(given["seconds"]) if "seconds" in given else None
    if "num_frames" in given:  # the exact count wins over a length in seconds
        frames = _bounded_int(given["num_frames"], "num_frames", 1, limits.max_frames)
    elif seconds is not None:
        if seconds * fps > limits.max_frames + 4:  # also keeps huge lengths from overflowing below
            raise invalid(f"seconds {given['seconds']} at {fps} fps makes more than {limits.max_frames} frames, "
                          f"the most allowed", "seconds")
        frames = _frames_for(seconds, fps)
    else:
        frames = defaults.num_frames
    if frames > limits.max_frames:
        raise invalid(f"that makes {frames} frames; at most {limits.max_frames} are allowed", "seconds")
    return frames, f"{frames / fps:.3g}"


def _seconds(value) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds < float("inf"):  # also rejects nan
        raise invalid(f"seconds must be a positive number, got {value!r}", "seconds")
    return seconds


def _frames_for(seconds: float, fps: int) -> int:
    # The nearest 4k+1 count (what HunyuanVideo's VAE takes), at least one frame.
    return 4 * max(0, round((seconds * fps - 1) / 4)) + 1


def _bounded_int(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(f"{name} must be an integer between {low} and {high}, got {value!r}", name)
    return value


def _check_cost(width: int, height: int, frames: int, steps: int, limits: ServiceLimits) -> None:
    cost = width * height * frames * steps
    if cost > limits.max_cost:
        raise ApiError(400, f"this request costs {width}x{height} pixels x {frames} frames x {steps} steps = "
                       f"{cost:,}; this server allows at most {limits.max_cost:,} per request: lower size, "
                       f"num_frames (or seconds) or num_inference_steps", param="size", code="cost_too_high")


def _check_shape(validate: ShapeValidator | None, shape: VideoShape, steps: int) -> None:
    if validate is None:
        return
    try:
        validate(shape, steps)
    except UserInputError as error:
        message = str(error)
        param = "num_frames" if "num_frames" in message else "size" if "width" in message else None
        raise invalid(message, param, "unsupported_shape") from error
