"""Helpers for image-to-video requests: small encoded images (valid, damaged, bombs), multipart
bodies as a browser or the openai SDK sends them, and a stand-in adapter that takes an image, for
HTTP tests over an engine that runs nothing."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from pipedit.adapter import check_video_shape
from pipedit.capabilities import Capabilities


def image_bytes(fmt: str = "png", size: tuple[int, int] = (40, 24), color=(200, 40, 10)) -> bytes:
    """An encoded image (png, jpeg, webp, gif) of `size` (width, height) with a gradient."""
    from PIL import Image

    image = Image.new("RGB", size, color)
    for x in range(size[0]):
        image.putpixel((x, 0), (x * 5 % 256, 100, 50))
    out = io.BytesIO()
    image.save(out, format=fmt.upper())
    return out.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A png whose header announces width x height but that holds no pixel data: what a
    decompression bomb looks like before decoding (decoding it would need width*height*3 bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def multipart(fields: dict, files: dict[str, tuple[str, bytes, str]] = {}, boundary="pipedit-b0undary"):
    """(body, headers) of a multipart/form-data POST; `files`: name -> (filename, bytes, content type)."""
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
             for name, value in fields.items()]
    for name, (filename, data, kind) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f"Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


class ImageModel:
    """The capabilities a served adapter declares, without a model: the service reaches them
    as its validator's __self__, as it reaches a real adapter's."""

    family = "fake-i2v"
    size_multiple = 16
    temporal_ratio = 4

    def __init__(self, takes_image=True, needs_image=False, takes_negative_prompt=True, takes_guidance_scale_2=False):
        self.capabilities = Capabilities(image=takes_image, needs_image=needs_image,
                                         negative_prompt=takes_negative_prompt, guidance_scale_2=takes_guidance_scale_2)

    def validate(self, shape, steps) -> None:
        check_video_shape(shape, steps, size_multiple=16, frame_stride=4, model=self.family)
