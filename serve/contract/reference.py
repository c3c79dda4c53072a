"""`input_reference`: the image an image-to-video job starts from, in the forms OpenAI's API takes
it: a multipart file part (what the openai SDK sends for `input_reference=open(path, "rb")`), or
a data URL (`data:image/png;base64,...`) as a JSON string, as OpenAI's object
`{"image_url": <data URL>}`, or as its multipart field `input_reference[image_url]`.

The server fetches no URL (an http(s) image_url would let any caller make it request any address)
and has no Files API (file_id): both are refused, saying what to send instead. The bytes are then
checked as pipedit.images.load_image checks every conditioning image (format; decoded pixels
under serve.max_image_pixels, read from the header before any pixel is decoded)."""

from __future__ import annotations

import base64
import binascii
import io
import re

from pipedit.errors import UserInputError
from pipedit.images import IMAGE_FORMATS, check_image_fits, load_image

from .errors import ApiError, invalid

PARAM = "input_reference"
# The multipart names of OpenAI's object form (the SDK writes nested fields as name[key]).
OBJECT_FIELDS = {f"{PARAM}[image_url]": "image_url", f"{PARAM}[file_id]": "file_id"}
_DATA_URL = re.compile(r"data:(?P<media>[^,;]*)(?P<params>(?:;[^,;]*)*),(?P<payload>.*)", re.S | re.I)
_SEND = (f"send the image itself: a multipart file part '{PARAM}' (what the openai SDK sends for "
         f"input_reference=open(path, 'rb')), or a data URL such as data:image/png;base64,...")


def from_json(value) -> bytes:
    """The image bytes of a JSON body's input_reference (a data URL, or {"image_url": <data URL>})."""
    if isinstance(value, dict):
        return _from_object(value, PARAM)
    if not isinstance(value, str):
        raise invalid(f"{PARAM} must be an image: {_SEND}; got a JSON {type(value).__name__}", PARAM)
    return decode_data_url(value, PARAM)


def from_form_fields(fields: dict[str, str]) -> bytes | None:
    """The image bytes of multipart text fields that carry one (removed from `fields`): a data URL in
    `input_reference`, or OpenAI's object form `input_reference[image_url]` / `[file_id]`."""
    given = {OBJECT_FIELDS[name]: fields.pop(name) for name in list(fields) if name in OBJECT_FIELDS}
    plain = fields.pop(PARAM, None)
    if plain is not None and given:
        raise invalid(f"send one {PARAM}, not both {PARAM} and {PARAM}[...]", PARAM)
    if given:
        return _from_object(given, f"{PARAM}[{next(iter(given))}]")
    return None if plain is None else decode_data_url(plain, PARAM)


def _from_object(value: dict, param: str) -> bytes:
    if "file_id" in value:
        raise ApiError(400, f"{PARAM}.file_id is not supported: this server has no Files API; {_SEND}",
                       param=param, code="unsupported_parameter")
    unknown = sorted(str(key) for key in set(value) - {"image_url"})
    if unknown or "image_url" not in value:
        raise invalid(f"{PARAM} as an object takes one key, image_url (a data URL); got "
                      f"{', '.join(unknown) or 'none'}", param)
    if not isinstance(value["image_url"], str):
        raise invalid(f"{PARAM}.image_url must be a data URL string such as data:image/png;base64,...", param)
    return decode_data_url(value["image_url"], param)


def decode_data_url(text: str, param: str = PARAM) -> bytes:
    """The bytes of a base64 data URL. An http(s) URL is refused: the server fetches nothing."""
    head = text.lstrip()[:8].lower()
    if head.startswith(("http://", "https:/")):
        raise ApiError(400, f"{param}: image URLs are not fetched by this server; {_SEND}", param=param,
                       code="unsupported_parameter")
    match = _DATA_URL.fullmatch(text.strip())
    if match is None:
        raise invalid(f"{param} is not a data URL; {_SEND}", param)
    if "base64" not in match["params"].lower().split(";"):
        raise invalid(f"{param}: only base64 data URLs are read (data:image/png;base64,...)", param)
    try:
        return base64.b64decode(re.sub(r"\s+", "", match["payload"]), validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{param}: the data URL's base64 payload cannot be decoded", param) from None


def check_image(data: bytes, max_pixels: int, video_size: tuple[int, int] | None = None) -> dict:
    """What the job stores about a valid image (format, width, height, bytes); 400 otherwise:
    `image_too_large` naming serve.max_image_pixels, `invalid_image` naming the formats, or
    `image_aspect_mismatch` when it cannot make a video of `video_size` (width, height)."""
    try:
        image = load_image(data, max_pixels=max_pixels, what=PARAM)
    except UserInputError as error:
        size = _announced_size(data)
        if size is None or size[0] * size[1] > max_pixels:
            raise ApiError(400, f"{_pixels_text(size)}; at most {max_pixels:,} are allowed (serve.max_image_pixels): "
                                f"send a smaller image (the model resizes it to the video's size anyway)",
                           param=PARAM, code="image_too_large") from None
        raise ApiError(400, str(error), param=PARAM, code="invalid_image") from None
    with image:
        width, height = image.size
    if video_size is not None:
        try:
            check_image_fits((width, height), video_size, what=PARAM)
        except UserInputError as error:
            raise ApiError(400, str(error), param=PARAM, code="image_aspect_mismatch") from None
    return {"format": _format(data), "width": width, "height": height, "bytes": len(data)}


def _announced_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the image header ((0, 0) when there is none to read; None when it
    announces more than PIL's own decompression-bomb limit). Decodes no pixel."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except Image.DecompressionBombError:
        return None
    except Exception:  # noqa: BLE001 - any unreadable header: not an oversized image
        return 0, 0


def _pixels_text(size: tuple[int, int] | None) -> str:
    from PIL import Image

    if size is None:
        return f"{PARAM} announces more than {2 * Image.MAX_IMAGE_PIXELS:,} pixels (a decompression bomb)"
    return f"{PARAM} is {size[0]}x{size[1]} = {size[0] * size[1]:,} pixels"


def _format(data: bytes) -> str:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return IMAGE_FORMATS[image.format]
