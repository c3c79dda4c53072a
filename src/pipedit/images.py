"""Conditioning images (image-to-video): decoded and checked where they enter pipedit (CLI,
render, API) and once more where the text rank encodes them.

Bomb-safe: PIL reads the pixel size from the file header without decoding, so the pixel limit is
checked before any pixel memory is allocated."""

from __future__ import annotations

import io

from .errors import InvalidRequestError

IMAGE_FORMATS = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp"}  # PIL's format name -> what users call it
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096  # decoded width x height of one conditioning image
# How far an image's aspect ratio may be from the video's (a factor, either way). Image conditioning
# scales the image so that it covers the video, or its short side to the image encoder's input
# (e.g. CLIP's 224), and crops: the long side grows with the image's aspect ratio. A 1x16777216
# image for a 32x32 video needs a 32x536870912 image in between (MemoryError) and 224x3758096384
# for CLIP (OverflowError). Within this factor that image stays at most 10x the video's pixels;
# a 9:16 photo for a 16:9 video is a factor of 3.2.
MAX_ASPECT_FACTOR = 10.0


def allowed_formats() -> str:
    *first, last = IMAGE_FORMATS.values()
    return f"{', '.join(first)} or {last}"


def placeholder_for(request, needs_image: bool):
    """pipedit's own requests (calibration, benchmarks): to a model that needs an image, with the
    placeholder image; otherwise unchanged."""
    from dataclasses import replace

    return replace(request, image=placeholder_image()) if needs_image and request.image is None else request


def placeholder_image(width: int = 64, height: int = 64) -> bytes:
    """A mid-gray png: the image of pipedit's own requests (calibration, benchmarks) to a model
    that needs one (image-to-video)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (128, 128, 128)).save(buffer, format="PNG")
    return buffer.getvalue()


def load_image(data: bytes, *, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, what: str = "image"):
    """Encoded image bytes -> an RGB PIL image. InvalidRequestError naming the allowed formats or
    the pixel limit when the bytes are not a png, jpeg or webp image of at most `max_pixels`."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, (bytes, bytearray)) or not data:
        raise InvalidRequestError(f"{what} is empty: send a {allowed_formats()} image")
    try:
        with Image.open(io.BytesIO(data)) as image:  # header only: nothing decoded yet
            fmt = image.format
            width, height = image.size
            if fmt not in IMAGE_FORMATS:
                raise InvalidRequestError(f"{what} is a {fmt or 'unknown'} image; allowed formats: {allowed_formats()}")
            if width * height > max_pixels:
                raise InvalidRequestError(
                    f"{what} is {width}x{height} = {width * height:,} pixels; at most {max_pixels:,} are allowed "
                    f"(it is resized to the video size anyway: send a smaller image)")
            image.seek(0)  # animated webp/png: the first frame
            return image.convert("RGB")
    except InvalidRequestError:
        raise
    except UnidentifiedImageError:
        raise InvalidRequestError(f"{what} is not an image pipedit can read; allowed formats: {allowed_formats()}") from None
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise InvalidRequestError(f"{what} is a damaged or truncated image ({error})") from None


def aspect_factor(image_size: tuple[int, int], video_size: tuple[int, int]) -> float:
    """How many times wider (or taller) the image's aspect ratio is than the video's, >= 1;
    sizes are (width, height)."""
    (width, height), (video_width, video_height) = image_size, video_size
    ratio = (width * video_height) / (height * video_width)
    return max(ratio, 1 / ratio)


def check_image_fits(image_size: tuple[int, int], video_size: tuple[int, int], what: str = "image") -> None:
    """InvalidRequestError naming MAX_ASPECT_FACTOR when an image of `image_size` cannot make a
    video of `video_size` (both (width, height)): its aspect ratio is too far from the video's."""
    factor = aspect_factor(image_size, video_size)
    if factor > MAX_ASPECT_FACTOR:
        (width, height), (video_width, video_height) = image_size, video_size
        raise InvalidRequestError(
            f"{what} is {width}x{height}, {factor:.4g} times as wide or tall for its size as the {video_width}x"
            f"{video_height} video; at most {MAX_ASPECT_FACTOR:g} times is allowed (the image is scaled to cover "
            f"the video and cropped): crop it closer to the video's shape, or ask for a video of the image's shape")
