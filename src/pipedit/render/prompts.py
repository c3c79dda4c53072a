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
from ..fields import FIELDS

_SIZE = re.compile(r"^\s*(\d{1,5})\s*[xX]\s*(\d{1,5})\s*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")
# Besides the keyed generation fields, a line's key holds the model, its image's content and, in a
# local render, the files (and scales) of the named adapters it chooses (model.offered_loras).
_KEYED_BESIDES_FIELDS = ("model", "image_sha256", "lora_files")

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


def line_keys() -> tuple[str, ...]:
    """Keys a JSONL line may carry: its name, `size` ("WxH", or height and width) and every
    generation field (pipedit.fields). Anything else is an error: a typo must not silently use a
    default."""
    return ("name", "size", *FIELDS)


def settings_key(settings: dict) -> str:
    """A hash of everything that changes the video: the keyed fields, the model and the image's
    content (not where it lies). A field at one of its `absent` values is left out, so lines keep
    the keys they had before that field existed."""
    picked = {spec.name: settings.get(spec.name) for spec in FIELDS.values()
              if spec.keyed and settings.get(spec.name) not in spec.absent}
    picked.update((k, settings[k]) for k in _KEYED_BESIDES_FIELDS if settings.get(k) is not None)
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def slug(text: str, limit: int = 40) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))[:limit].strip("-")


def is_jsonl(path: Path, lines: list[str]) -> bool:
    if path.suffix.lower() in (".jsonl", ".json"):
        return True
    first = next((line.strip() for line in lines if line.strip()), "")
    return first.startswith("{")


def read_lines(path: Path, defaults: GenerationDefaults, model: str,
               validate: Validator | None = None, loras=None) -> list[RenderLine]:
    """Every non-blank, non-comment line of the file, resolved; errors stay on their line.
    `loras`: the adapters lines may name (a local render's model.offered_loras, a LoraOffer); None: the
    server decides (a remote render)."""
    if not path.is_file():
        raise UserInputError(f"prompts file {path} does not exist; give a .jsonl or .txt file")
    text = path.read_text(encoding="utf-8").splitlines()
    jsonl = is_jsonl(path, text)
    lines, names = [], {}
    for number, raw in enumerate(text, start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        line = _resolve(number, stripped, jsonl, defaults, model, validate, path.parent, loras)
        if line.name in names:
            line.error = line.error or (f"name '{line.name}' is already used by line {names[line.name]}; "
                                        f"names must be unique")
        else:
            names[line.name] = number
        lines.append(line)
    return lines


def _resolve(number: int, text: str, jsonl: bool, defaults: GenerationDefaults, model: str,
             validate: Validator | None, folder: Path, loras) -> RenderLine:
    line = RenderLine(number, f"line-{number:04d}")
    try:
        given = _parse(text) if jsonl else {"prompt": text}
        line.name = _name(number, given)
        line.settings = _settings(given, defaults, model)
        line.settings.update(_image(given, folder))
        if loras is not None and line.settings.get("loras"):  # each at the scale it runs at, and its file
            line.settings["loras"] = loras.choose(line.settings["loras"])
            line.settings["lora_files"] = loras.identities(line.settings["loras"])
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
    unknown = sorted(set(given) - set(line_keys()))
    if unknown:
        raise UserInputError(f"unknown keys {unknown}; allowed: {', '.join(line_keys())}")
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
    """Every generation field of the line, its own value over the run's default, checked as every
    interface checks it (pipedit.fields). A field without a value (nullable, none given) is left
    out, as are the image's (see _image)."""
    prompt = given.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserInputError('missing prompt: each line needs a non-empty "prompt" string')
    width, height = _size(given, defaults)
    values = dict(given, width=width, height=height)
    settings = {}
    for spec in FIELDS.values():
        if spec.kind is bytes:
            continue
        value = values.get(spec.name, getattr(defaults, spec.name) if spec.in_config else None)
        value = spec.check(value)
        if value is not None:
            settings[spec.name] = value
    settings["model"] = model
    return settings


def _image(given: dict, folder: Path) -> dict:
    """The line's image, when it gives one: its path (relative to the prompts file) and digest.
    It is read and decoded now, so that a bad file fails its line at once; whether the model
    takes it is the validator's question."""
    image = given.get("image")
    if image is None:
        return {}
    if not isinstance(image, str) or not image.strip():
        raise UserInputError(f'image must be a file path (relative to the prompts file), got {image!r}')
    from .inputs import read_image_file

    path = (folder / image).resolve()  # an absolute `image` stays as it is
    return {"image": str(path), "image_sha256": hashlib.sha256(read_image_file(path)).hexdigest()}


def _size(given: dict, defaults: GenerationDefaults) -> tuple[int, int]:
    if "size" in given:
        if "height" in given or "width" in given:
            raise UserInputError('give either "size" ("WxH") or "height"/"width", not both')
        match = _SIZE.match(str(given["size"]))
        if not match:
            raise UserInputError(f'size must be "WIDTHxHEIGHT" such as "128x128", got {given["size"]!r}')
        return int(match.group(1)), int(match.group(2))
    return given.get("width", defaults.width), given.get("height", defaults.height)
