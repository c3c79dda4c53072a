"""GET /v1/videos/{id}/content: the mp4, whole or not at all.

The file is opened before anything is answered and sent from that open descriptor: a DELETE or
the retention sweep that unlinks it meanwhile removes only its name (POSIX), so a download that
has begun is always complete, and one that comes after the unlink is a 404 like any other
deleted job (never a 500, never a body cut short). One byte range (`Range: bytes=a-b`, `a-`,
`-n`) is answered 206, as a video element seeking asks; other Range forms get the whole file.
Hazard: a Range header's numbers are the client's, of any length, and Python's int() refuses more
than 4300 digits: a number longer than any file's size is read as "past the end" without int()."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..contract.errors import not_found

CHUNK = 256 * 1024
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def video_response(path: Path, video_id: str, range_header: str | None) -> Response:
    """The response for the mp4 at `path`; 404 video_not_found when it is gone already (deleted
    or swept since its row was read)."""
    try:
        file = open(path, "rb")
    except FileNotFoundError:
        raise not_found(video_id) from None
    try:
        size = os.fstat(file.fileno()).st_size
        span = byte_range(range_header, size)
        if span != "unsatisfiable":
            return OpenFileResponse(file, size, span, filename=f"{video_id}.mp4")  # it closes the file
    except BaseException:
        file.close()
        raise
    file.close()
    return Response(status_code=416, headers={"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"})


def byte_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """(first, last) byte of a single satisfiable range; None for the whole file (no header, or a
    form this server does not serve: several ranges, other units); "unsatisfiable" past the end."""
    match = _RANGE.fullmatch((header or "").strip().replace(" ", ""))
    if match is None or match[1] == match[2] == "":
        return None
    if match[1] == "":  # the last n bytes
        length = _number(match[2])
        return (max(0, size - length), size - 1) if length and size else "unsatisfiable"
    first = _number(match[1])
    last = _number(match[2]) if match[2] else size - 1
    if first >= size or last < first:
        return "unsatisfiable"
    return first, min(last, size - 1)


_MAX_DIGITS = 20  # more than any file size has (2**64 has 20 digits)


def _number(digits: str) -> int:
    """The decimal `digits` as an int; a number of more than _MAX_DIGITS digits (leading zeros
    aside) as 10**_MAX_DIGITS, which is past the end of any file."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MAX_DIGITS else 10 ** _MAX_DIGITS


class OpenFileResponse(Response):
    """Streams an already open file (it owns it and closes it when done, or when the client goes)."""

    def __init__(self, file: BinaryIO, size: int, span: tuple[int, int] | None, *, filename: str,
                 media_type: str = "video/mp4"):
        self.file, self.size = file, size
        self.first, self.last = span if span else (0, size - 1)
        headers = {"Content-Disposition": f'attachment; filename="{filename}"', "Accept-Ranges": "bytes",
                   "Content-Length": str(self.last - self.first + 1)}
        if span:
            headers["Content-Range"] = f"bytes {self.first}-{self.last}/{size}"
        super().__init__(status_code=206 if span else 200, headers=headers, media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            position, end = self.first, self.last + 1
            while position < end:
                # pread: positional, so nothing shares the file offset; a short read (the file was
                # truncated, which a finished video never is) ends the response as sent.
                data = await anyio.to_thread.run_sync(os.pread, self.file.fileno(), min(CHUNK, end - position),
                                                      position)
                if not data:
                    break
                position += len(data)
                await send({"type": "http.response.body", "body": data, "more_body": position < end})
            if position < end:
                raise RuntimeError(f"the video file ended at byte {position} of {end}")
            if self.first > self.last:  # an empty file: one empty body closes the response
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.file.close()
