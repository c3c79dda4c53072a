"""Turns the client's create parameters into complete, checked generation settings.

Everything is checked here, before the engine sees the job: a job the store accepts must be
one the engine can run (the model's own rules come from its adapter's `validate`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from pipedit.adapter import UnsupportedInputError, VideoShape, check_inputs
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError

from .errors import ApiError, invalid
from .reference import check_image
from .schemas import VideoCreateParams

ShapeValidator = Callable[[VideoShape, int], None]  # raises UserInputError naming what is allowed
_SIZE = re.compile(r"^\s*(\d{1,5})\s*[xX]\s*(\d{1,5})\s*$")
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone UTF-16 halves: JSON may carry them, UTF-8 cannot


@dataclass(frozen=True)
class ServiceLimits:
    max_queued: int = 16  # queued jobs beyond this get 429
    max_queued_per_key: int = 8  # queued jobs of one API key beyond this get 429 (when keys are set)
    max_cost: int = 1280 * 720 * 129 * 50  # height x width x num_frames x steps of one request
    max_pixels: int = 1280 * 720 * 129  # height x width x num_frames of one request (memory, whatever the steps)
    max_body_bytes: int = 1 << 20  # request body of a JSON (or form) route; 413 above
    max_upload_bytes: int = 20 << 20  # multipart body of a create (it may upload an input_reference image); 413 above
    max_image_pixels: int = 4096 * 4096  # decoded width x height of an input_reference image; 400 above
    max_event_streams: int = 128  # open /events streams of a replica (429 beyond)
    max_event_streams_per_key: int = 8  # open /events streams of one API key on a replica (429 beyond)
    event_stream_max_s: float = 300.0  # a stream ends after this long; clients reconnect
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
    cache: str = "none"  # the effective step cache (the request's, else the server's default)
    negative_prompt: str | None = None  # None: the model's default (models with classifier-free guidance)
    image: dict | None = None  # the input_reference's format, width, height, bytes (the bytes: JobStore.image)
    guidance_scale_2: float | None = None  # two-expert models: the low-noise expert's; None: guidance_scale

    def to_json(self) -> dict:
        return asdict(self)


def resolve(params: VideoCreateParams, model_name: str, defaults: GenerationDefaults, limits: ServiceLimits,
            validate: ShapeValidator | None = None, image: bytes | None = None) -> JobSettings:
    """`image`: the input_reference's bytes, when the request has one."""
    given = params.given()
    _check_text(given)
    _check_model(given.get("model"), model_name)
    prompt = _check_prompt(params.prompt, limits)
    guidance = _guidance(given.get("guidance_scale", defaults.guidance_scale), "guidance_scale", limits)
    guidance_2 = given.get("guidance_scale_2", defaults.guidance_scale_2)
    guidance_2 = None if guidance_2 is None else _guidance(guidance_2, "guidance_scale_2", limits)
    negative = _check_inputs(getattr(validate, "__self__", None), given.get("negative_prompt"), image, limits,
                             guidance, guidance_2)
    image_info = check_image(image, limits.max_image_pixels) if image is not None else None
    width, height = _size(given["size"], limits) if "size" in given else (defaults.width, defaults.height)
    fps = _bounded_int(given.get("fps", defaults.fps), "fps", 1, limits.max_fps)
    frames, seconds = _frames(given, fps, defaults, limits)
    steps = _bounded_int(given.get("num_inference_steps", defaults.steps), "num_inference_steps", 1, limits.max_steps)
    seed = _bounded_int(given.get("seed", defaults.seed), "seed", 0, 2**63 - 1)
    _check_cost(width, height, frames, steps, limits)
    _check_shape(validate, VideoShape(height, width, frames), steps)
    return JobSettings(prompt, width, height, frames, fps, steps, guidance, seed, seconds,
                       _cache(given.get("cache", defaults.cache), validate), negative, image_info, guidance_2)


def _guidance(value, name: str, limits: ServiceLimits) -> float:
    guidance = float(value)
    if not 0.0 <= guidance <= limits.max_guidance_scale:
        raise invalid(f"{name} must be between 0 and {limits.max_guidance_scale}, got {guidance}", name)
    return guidance


def _check_inputs(adapter, negative_prompt: str | None, image: bytes | None, limits: ServiceLimits,
                  guidance: float, guidance_2: float | None) -> str | None:
    """What the served model takes besides the prompt (its adapter's takes_negative_prompt,
    takes_image, needs_image, takes_guidance_scale_2; no adapter known: none of them); returns
    the negative prompt to run with."""
    try:
        check_inputs(adapter, negative_prompt=negative_prompt, has_image=image is not None,
                     guidance_scale_2=guidance_2, guidance_scale=guidance)
    except UnsupportedInputError as error:
        param = "input_reference" if error.param == "image" else error.param
        missing = param == "input_reference" and image is None
        taken = param == "guidance_scale_2" and getattr(adapter, "takes_guidance_scale_2", False)  # a bad value
        code = "missing_required_parameter" if missing else "invalid_value" if taken else "unsupported_parameter"
        raise invalid(f"{error}{' as input_reference' if missing else ''}", param, code) from None
    if negative_prompt is None or not getattr(adapter, "takes_negative_prompt", False):
        return None  # a blank one for a model without a negative branch: nothing to run with
    if len(negative_prompt) > limits.max_prompt_chars:
        raise invalid(f"negative_prompt has {len(negative_prompt)} characters; at most {limits.max_prompt_chars} "
                      f"are allowed", "negative_prompt", "prompt_too_long")
    return negative_prompt


def _cache(value, validate: ShapeValidator | None) -> str:
    """The cache setting, checked against the served family too (teacache needs its published
    coefficients), so that a job the store accepts does not fail in the engine for it."""
    from pipedit.cache.policy import teacache_coefficients
    from pipedit.cache.spec import parse_cache

    family = getattr(getattr(validate, "__self__", None), "family", None)  # the adapter's, when known
    try:
        spec = parse_cache(value)
        if spec.kind == "teacache" and family is not None:
            teacache_coefficients(family)
        return str(spec)
    except UserInputError as error:
        raise invalid(str(error), "cache") from None


def _check_text(given: dict) -> None:
    """Refuses strings that cannot be stored and sent back as UTF-8 (a lone surrogate such as the
    JSON escape \\ud800), before anything is stored."""
    for name in ("prompt", *sorted(set(given) - {"prompt"})):
        value = given.get(name)
        if isinstance(value, str) and (match := _SURROGATE.search(value)):
            raise invalid(f"{name} contains an unpaired UTF-16 surrogate (\\u{ord(match[0]):04x} at character "
                          f"{match.start()}), which is not valid Unicode text: send UTF-8 text, or escape "
                          f"characters outside the BMP as a surrogate pair", name,
                          "invalid_prompt" if name == "prompt" else "invalid_value")


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
    pixels = width * height * frames  # what memory grows with (latents, attention, decode), whatever the steps
    if pixels > limits.max_pixels:
        raise ApiError(400, f"this request has {width}x{height} pixels x {frames} frames = {pixels:,} pixels; "
                       f"this server allows at most {limits.max_pixels:,} per request (serve.max_pixels): "
                       f"lower size or num_frames (or seconds)", param="size", code="too_many_pixels")
    cost = pixels * steps
    if cost > limits.max_cost:
        raise ApiError(400, f"this request costs {width}x{height} pixels x {frames} frames x {steps} steps = "
                       f"{cost:,}; this server allows at most {limits.max_cost:,} per request (serve.max_cost): "
                       f"lower size, num_frames (or seconds) or num_inference_steps", param="size",
                       code="cost_too_high")


def _check_shape(validate: ShapeValidator | None, shape: VideoShape, steps: int) -> None:
    if validate is None:
        return
    try:
        validate(shape, steps)
    except UserInputError as error:
        message = str(error)
        param = "num_frames" if "num_frames" in message else "size" if "width" in message else None
        raise invalid(message, param, "unsupported_shape") from error
