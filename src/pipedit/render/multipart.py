"""multipart/form-data bodies (RFC 7578) as OpenAI's SDK posts them: every field a text part (numbers
written out as text), each file a part with a filename and its media type."""

from __future__ import annotations

import json
import uuid

# Leading bytes -> (media type, file suffix) of the image formats pipedit takes (pipedit.images).
_IMAGE_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", ("image/png", "png")), (b"\xff\xd8\xff", ("image/jpeg", "jpg")))


def image_type(data: bytes) -> tuple[str, str]:
    """(media type, suffix) of png, jpeg or webp bytes; application/octet-stream otherwise (the
    server decides what it accepts)."""
    for signature, kind in _IMAGE_SIGNATURES:
        if data.startswith(signature):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", "webp"
    return "application/octet-stream", "bin"


def encode(fields: dict, files: dict[str, tuple[str, bytes, str]]) -> tuple[bytes, str]:
    """(body, Content-Type). `files`: part name -> (file name, bytes, media type). Names and file
    names are pipedit's own (plain ASCII without quotes): nothing here escapes them."""
    boundary = uuid.uuid4().hex
    while any(boundary.encode() in data for _, data, _ in files.values()):  # practically never
        boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(_head(boundary, f'form-data; name="{name}"') + _text(value).encode() + b"\r\n")
    for name, (file_name, data, media_type) in files.items():
        head = _head(boundary, f'form-data; name="{name}"; filename="{file_name}"', media_type)
        parts.append(head + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def _head(boundary: str, disposition: str, media_type: str | None = None) -> bytes:
    lines = [f"--{boundary}", f"Content-Disposition: {disposition}"]
    if media_type:
        lines.append(f"Content-Type: {media_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _text(value) -> str:
    if isinstance(value, bool):  # as the SDK writes booleans
        return "true" if value else "false"
    if isinstance(value, (list, dict)):  # a list field (loras) as one JSON part, which the server reads
        return json.dumps(value)
    return str(value)
