"""Turns the client's create parameters into complete, checked generation settings.

Everything is checked here, before the engine sees the job: a job the store accepts must be
one the engine can run (the model's own rules come from its adapter's `validate`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pipedit.adapter import FieldRuleError, UnsupportedInputError, VideoShape, check_inputs
from pipedit.capabilities import Capabilities
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError
from pipedit.fields import FIELDS, GenerationField, api_fields, request_fields
from pipedit.lora.spec import NO_LORAS, LoraOffer

from .errors import ApiError, invalid
from .reference import check_image

ShapeValidator = Callable[[VideoShape, int], None]  # raises UserInputError naming what is allowed
_SIZE = re.compile(r"^\s*(\d{1,5})\s*[xX]\s*(\d{1,5})\s*$", re.ASCII)  # ASCII digits: int() reads "３２" too
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
    body_timeout_s: float = 30.0  # a request body must arrive within this (plus a second per body_min_rate bytes)
    body_min_rate: int = 64 << 10  # bytes of body that buy one more second (a slow large upload keeps going)
    linger_s: float = 5.0  # an answer sent before the body is read reads the rest this long, then closes
    max_steps: int = 100
    max_guidance_scale: float = 30.0
    max_prompt_chars: int = 4000
    max_side: int = 1920  # pixels, either dimension
    max_frames: int = 257
    max_fps: int = 60


@dataclass(frozen=True)
class JobSettings:
    """What a job runs with; stored as the job's `params`: every generation field under its API
    name (width and height by their own; the image as its format, width, height and bytes, the
    bytes themselves in JobStore.image), plus the clip's `seconds`. Read as attributes."""

    values: dict

    def __getattr__(self, name: str):
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def to_json(self) -> dict:
        return dict(self.values)


def stored_name(spec: GenerationField) -> str:
    """Where a job's params keep a generation field: under its API name when the create schema
    takes it by that name, else under its own (width, height, image)."""
    return spec.api if spec in api_fields() else spec.name


def request_values(params: dict) -> dict:
    """A stored job's params -> the VideoRequest fields they hold (rows written before a field
    existed lack it: the request's default)."""
    return {spec.name: params[stored_name(spec)] for spec in request_fields()
            if spec.kind is not bytes and stored_name(spec) in params}


def resolve(params, model_name: str, defaults: GenerationDefaults, limits: ServiceLimits,
            validate: ShapeValidator | None = None, image: bytes | None = None,
            loras: LoraOffer = NO_LORAS) -> JobSettings:
    """`params`: a VideoCreateParams; `image`: the input_reference's bytes, when the request has
    one; `loras`: the adapters the server offers by name. Each generation field is checked as
    every interface checks it (pipedit.fields), bounded by the server's limit where it has one."""
    given = params.given()
    _check_text(given)
    _check_model(given.get("model"), model_name)
    adapter = getattr(validate, "__self__", None)  # the served adapter, when validate is its method
    prompt = _check_prompt(params.prompt, limits)
    values = {spec.name: _field(spec, given.get(spec.api, _default(spec, defaults)), limits)
              for spec in api_fields() if spec.name not in ("prompt", "num_frames")}
    values["prompt"] = prompt
    values["width"], values["height"] = _size(given["size"], limits) if "size" in given else \
        (defaults.width, defaults.height)
    values["num_frames"], seconds = _frames(given, values["fps"], defaults, limits)
    values["negative_prompt"] = _check_inputs(adapter, dict(values, image=image), limits)
    values["cache"] = _cache(values["cache"], adapter)
    values["loras"] = _loras(values["loras"], loras)
    _check_cost(values["width"], values["height"], values["num_frames"], values["steps"], limits)
    _check_shape(validate, VideoShape(values["height"], values["width"], values["num_frames"]), values["steps"])
    stored = {stored_name(spec): values[spec.name] for spec in FIELDS.values() if spec.name in values}
    stored["image"] = check_image(image, limits.max_image_pixels, (values["width"], values["height"])) \
        if image is not None else None
    return JobSettings(dict(stored, seconds=seconds))


def _default(spec: GenerationField, defaults: GenerationDefaults):
    return getattr(defaults, spec.name) if spec.in_config else None


def _field(spec: GenerationField, value, limits: ServiceLimits):
    """One field's value checked as pipedit.fields checks it, below the server's limit; 400
    `invalid_value` naming the field by its API name."""
    try:
        return spec.check(value, called=spec.api, limits=limits)
    except UserInputError as error:
        raise invalid(str(error), spec.api) from None


def _check_inputs(adapter, values: dict, limits: ServiceLimits) -> str | None:
    """What the served model takes besides the prompt (its adapter's capabilities; no adapter
    known: none of them); returns the negative prompt to run with."""
    try:
        check_inputs(adapter, **{name: values.get(name) for name in FIELDS})
    except UnsupportedInputError as error:
        param = FIELDS[error.param].api
        missing = error.param == "image" and values.get("image") is None
        ruled = isinstance(error, FieldRuleError)  # a value the model takes, refused with the others
        code = "missing_required_parameter" if missing else "invalid_value" if ruled else "unsupported_parameter"
        raise invalid(f"{error}{' as input_reference' if missing else ''}", param, code) from None
    negative_prompt = values.get("negative_prompt")
    if negative_prompt is None or not getattr(adapter, "capabilities", Capabilities()).negative_prompt:
        return None  # a blank one for a model without a negative branch: nothing to run with
    if len(negative_prompt) > limits.max_prompt_chars:
        raise invalid(f"negative_prompt has {len(negative_prompt)} characters; at most {limits.max_prompt_chars} "
                      f"are allowed", "negative_prompt", "prompt_too_long")
    return negative_prompt


def _cache(value: str | None, adapter) -> str:
    """The cache setting (None: the server's default, already in `value` then), checked against
    the served family too (teacache needs its published coefficients), so that a job the store
    accepts does not fail in the engine for it."""
    from pipedit.cache.policy import teacache_coefficients
    from pipedit.cache.spec import parse_cache

    family = getattr(adapter, "family", None)
    try:
        spec = parse_cache(value)
        if spec.kind == "teacache" and family is not None:
            teacache_coefficients(family)
        return str(spec)
    except UserInputError as error:
        raise invalid(str(error), "cache") from None


def _loras(chosen, offer: LoraOffer) -> list[dict]:
    """The request's adapters as stored and echoed, each with the scale it runs at (a name's
    default where the request gives none); 400 `lora_not_found` naming the offered ones."""
    try:
        resolved = offer.choose(chosen)
    except UserInputError as error:
        unknown = any(name not in offer.names for name, _ in chosen or ())
        raise invalid(str(error), "loras", "lora_not_found" if unknown else "invalid_value") from None
    return FIELDS["loras"].to_api(resolved)


def _check_text(given: dict) -> None:
    """Refuses strings that cannot be stored and sent back as UTF-8 (a lone surrogate such as the
    JSON escape \\ud800), before anything is stored."""
    for name in ("prompt", *sorted(set(given) - {"prompt"})):
        value = given.get(name)
        if isinstance(value, str) and (match := _SURROGATE.search(value)):
            raise bad_text(name, f"contains an unpaired UTF-16 surrogate (\\u{ord(match[0]):04x} at character "
                                 f"{match.start()}), which is not valid Unicode text: send UTF-8 text, or escape "
                                 f"characters outside the BMP as a surrogate pair")


def bad_text(name: str, why: str) -> ApiError:
    """400 for a text field that is not valid Unicode, whichever way it came (a JSON escape, multipart
    bytes): `invalid_prompt` for the prompt, `invalid_value` for another field, naming it."""
    return invalid(f"{name} {why}", name, "invalid_prompt" if name == "prompt" else "invalid_value")


def _check_model(model: str | None, model_name: str) -> None:
    if model is not None and model != model_name:
        raise ApiError(400, f"model '{model}' is not served here; use '{model_name}' or leave model out",
                       param="model", code="model_not_found")


def _check_prompt(prompt: str, limits: ServiceLimits) -> str:
    try:
        prompt = FIELDS["prompt"].check(prompt)
    except UserInputError as error:
        raise invalid(str(error), "prompt", "empty_prompt") from None
    if len(prompt) > limits.max_prompt_chars:
        raise invalid(f"prompt has {len(prompt)} characters; at most {limits.max_prompt_chars} are allowed",
                      "prompt", "prompt_too_long")
    return prompt


def _size(text: str, limits: ServiceLimits) -> tuple[int, int]:
    match = _SIZE.match(text)
    if match is None:
        raise invalid(f"size must be WIDTHxHEIGHT in pixels, e.g. 128x128; got {text!r}", "size")
    return _field(FIELDS["width"], int(match[1]), limits), _field(FIELDS["height"], int(match[2]), limits)


def _frames(given: dict, fps: int, defaults: GenerationDefaults, limits: ServiceLimits) -> tuple[int, str]:
    """num_frames and the clip length in seconds (as the string OpenAI's API uses)."""
    seconds = _seconds(given["seconds"]) if "seconds" in given else None
    if "num_frames" in given:  # the exact count wins over a length in seconds
        frames = _field(FIELDS["num_frames"], given["num_frames"], limits)
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
