"""Reading a prompts file (JSONL or plain text) into resolved, hashed render lines.

Each line resolves to complete settings (the line's own values over the run's defaults) and a
key: a hash of everything that changes the video. Resuming matches on that key, so an edited
line renders again. A line that can't be used carries its error and fails alone.

Invariant: a line's `name` (and so its file name) holds only [A-Za-z0-9_-], so no user string
can reach outside the output folder or collide with the manifest or partial files.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..config import GenerationDefaults
from ..errors import UserInputError

# Keys a JSONL line may carry; anything else is an error (a typo must not silently use a default).
LINE_KEYS = ("prompt", "name", "size", "height", "width", "num_frames", "steps", "seed",
             "guidance_scale", "guidance_scale_2", "fps", "negative_prompt", "image", "cache")
_INT_KEYS = ("height", "width", "num_frames", "steps", "seed", "fps")
_SIZE = re.compile(r"^\s*(\d{1,5})\s*[xX]\s*(\d{1,5})\s*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")
HASHED = ("prompt", "height", "width", "num_frames", "steps", "seed", "guidance_scale", "fps", "model", "cache",
          "negative_prompt", "image_sha256", "guidance_scale_2")
# Settings a line has only when it gives them; lines without them keep the keys they had before.
_OPTIONAL = ("negative_prompt", "image", "image_sha256", "guidance_scale_2")

Validator = Callable[[dict], None]  # raises UserInputError for settings the model can't take


@dataclass
class RenderLine:
    number: int  # 1-based line number in the prompts file
    name: str
    settings: dict = field(default_factory=dict)  # prompt, height, width, num_frames, steps, seed, ...
    error: str | None = None

    @property
    def key(self) -> str:
        return settings_key(self.settings)

    @property
    def file_name(self) -> str:
        return f"{self.name}.mp4"


def settings_key(settings: dict) -> str:
    picked = {k: settings.get(k) for k in HASHED}
    if picked["cache"] in (None, "none"):  # uncached lines keep the keys they had before caching existed
        del picked["cache"]
    for k in _OPTIONAL:  # the image counts by its content (image_sha256), not by where it lies
        if picked.get(k) is None:
            picked.pop(k, None)
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def slug(text: str, limit: int = 40) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))[:limit].strip("-")


def is_jsonl(path: Path, lines: list[str]) -> bool:
    if path.suffix.lower() in (".jsonl", ".json"):
        return True
    first = next((line.strip() for line in lines if line.strip()), "")
    return first.startswith("{")


def read_lines(path: Path, defaults: GenerationDefaults, model: str,
               validate: Validator | None = None) -> list[RenderLine]:
    """Every non-blank, non-comment line of the file, resolved; errors stay on their line."""
    if not path.is_file():
        raise UserInputError(f"prompts file {path} does not exist; give a .jsonl or .txt file")
    text = path.read_text(encoding="utf-8").splitlines()
    jsonl = is_jsonl(path, text)
    lines, names = [], {}
    for number, raw in enumerate(text, start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        line = _resolve(number, stripped, jsonl, defaults, model, validate, path.parent)
        if line.name in names:
            line.error = line.error or (f"name '{line.name}' is already used by line {names[line.name]}; "
                                        f"names must be unique")
        else:
            names[line.name] = number
        lines.append(line)
    return lines


def _resolve(number: int, text: str, jsonl: bool, defaults: GenerationDefaults, model: str,
             validate: Validator | None, folder: Path) -> RenderLine:
    line = RenderLine(number, f"line-{number:04d}")
    try:
        given = _parse(text) if jsonl else {"prompt": text}
        line.name = _name(number, given)
        line.settings = _settings(given, defaults, model)
        line.settings.update(_inputs(given, folder, defaults))
        if validate is not None:
            validate(line.settings)
    except UserInputError as error:
        line.error = str(error)
    return line


def _parse(text: str) -> dict:
    try:
        given = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserInputError(f"invalid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(given, dict):
        raise UserInputError('each line must be a JSON object such as {"prompt": "..."}')
    unknown = sorted(set(given) - set(LINE_KEYS))
    if unknown:
        raise UserInputError(f"unknown keys {unknown}; allowed: {', '.join(LINE_KEYS)}")
    return given


def _name(number: int, given: dict) -> str:
    name = given.get("name")
    if name is None:
        prompt = given.get("prompt")
        tail = slug(prompt) if isinstance(prompt, str) else ""
        return f"{number:04d}-{tail}" if tail else f"line-{number:04d}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise UserInputError(f"name {name!r} is not allowed: use 1-80 letters, digits, '_' or '-', "
                             f"starting with a letter or digit")
    return name


def _settings(given: dict, defaults: GenerationDefaults, model: str) -> dict:
    prompt = given.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserInputError('missing prompt: each line needs a non-empty "prompt" string')
    for key in _INT_KEYS:
        if key in given and (not isinstance(given[key], int) or isinstance(given[key], bool)):
            raise UserInputError(f"{key} must be an integer, got {given[key]!r}")
    if "guidance_scale" in given and not isinstance(given["guidance_scale"], (int, float)):
        raise UserInputError(f"guidance_scale must be a number, got {given['guidance_scale']!r}")
    width, height = _size(given, defaults)
    return {
        "prompt": prompt, "height": height, "width": width,
        "num_frames": given.get("num_frames", defaults.num_frames), "steps": given.get("steps", defaults.steps),
        "seed": given.get("seed", defaults.seed), "fps": given.get("fps", defaults.fps),
        "guidance_scale": float(given.get("guidance_scale", defaults.guidance_scale)), "model": model,
        "cache": _cache(given.get("cache", defaults.cache)),
    }


def _inputs(given: dict, folder: Path, defaults: GenerationDefaults) -> dict:
    """negative_prompt, guidance_scale_2 and image, when the line (or, for guidance_scale_2, the
    defaults) gives them; whether the model takes them is the validator's question. The image is
    read and decoded now: a bad file fails its line at once."""
    inputs = {}
    negative = given.get("negative_prompt")
    if negative is not None:
        if not isinstance(negative, str):
            raise UserInputError(f"negative_prompt must be a string, got {negative!r}")
        inputs["negative_prompt"] = negative
    scale_2 = given.get("guidance_scale_2", defaults.guidance_scale_2)
    if scale_2 is not None:
        if isinstance(scale_2, bool) or not isinstance(scale_2, (int, float)):
            raise UserInputError(f"guidance_scale_2 must be a number, got {scale_2!r}")
        inputs["guidance_scale_2"] = float(scale_2)
    image = given.get("image")
    if image is not None:
        if not isinstance(image, str) or not image.strip():
            raise UserInputError(f'image must be a file path (relative to the prompts file), got {image!r}')
        from .inputs import read_image_file

        path = (folder / image).resolve()  # an absolute `image` stays as it is
        inputs["image"] = str(path)
        inputs["image_sha256"] = hashlib.sha256(read_image_file(path)).hexdigest()
    return inputs


def _cache(value) -> str:
    from ..cache.spec import parse_cache

    return str(parse_cache(value))


def _size(given: dict, defaults: GenerationDefaults) -> tuple[int, int]:
    if "size" in given:
        if "height" in given or "width" in given:
            raise UserInputError('give either "size" ("WxH") or "height"/"width", not both')
        match = _SIZE.match(str(given["size"]))
        if not match:
            raise UserInputError(f'size must be "WIDTHxHEIGHT" such as "128x128", got {given["size"]!r}')
        return int(match.group(1)), int(match.group(2))
    return given.get("width", defaults.width), given.get("height", defaults.height)
