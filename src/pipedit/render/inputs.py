"""What a request carries besides its prompt and shape (a conditioning image, a negative prompt),
checked where `generate` and `render` take it: the image file is read and decoded, and the model's
capabilities are read from its configs, all before any weights load."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import UserInputError

# Far above any real conditioning image (the pixel limit binds first); only stops reading a
# huge file that is not one into memory.
MAX_IMAGE_BYTES = 64 << 20


def read_image_file(path: Path, what: str = "image") -> bytes:
    """The file's bytes once pipedit.images.load_image accepts them (png, jpeg or webp, pixel
    limit); UserInputError naming the file and what is allowed otherwise."""
    from ..images import allowed_formats, load_image

    if not path.is_file():
        found = "is a folder" if path.is_dir() else "does not exist"
        raise UserInputError(f"{what} {path} {found}; give a {allowed_formats()} file")
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise UserInputError(f"{what} {path} is {size:,} bytes; at most {MAX_IMAGE_BYTES:,} are read "
                             f"(send a smaller {allowed_formats()} image)")
    data = path.read_bytes()
    load_image(data, what=f"{what} {path}")
    return data


def model_checker(model_path: str | Path, model: str | None):
    """check(values): the model's own shape checks and pipedit.adapter.check_inputs on a request's
    generation fields (`values`: a VideoRequest's, or a render line's settings, the image as its
    bytes or its file), from the checkpoint's configs only (no weights load)."""
    from ..adapter import VideoShape, check_inputs, model_inputs
    from ..fields import FIELDS

    adapter = model_inputs(model_path, model)

    def check(values: dict) -> None:
        adapter.validate(VideoShape(values["height"], values["width"], values["num_frames"]), values["steps"])
        check_inputs(adapter, **{name: values.get(name) for name in FIELDS})

    return check


def config_checker(config):
    """model_checker for an EngineConfig's model (the demo checkpoint when it names no path)."""
    from ..runtime.engine import resolve_model_path

    return model_checker(resolve_model_path(config.model.path, config.model.name), config.model.name)


def line_image(settings: dict) -> bytes | None:
    """A render line's image bytes (settings from pipedit.render.prompts), read again when its
    request is built (lines keep only the path and digest); UserInputError when they are no
    longer the bytes the line's key and manifest entry were made from."""
    if settings.get("image") is None:
        return None
    path = Path(settings["image"])
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserInputError(f"image {path} cannot be read any more ({error.strerror or error})") from None
    if hashlib.sha256(data).hexdigest() != settings["image_sha256"]:
        raise UserInputError(f"image {path} changed during the run; rerun the same command to render it")
    return data
