"""Rendering through a running `pipedit serve` (its /v1/videos API), at most N jobs in flight.

Every setting is sent explicitly (the server's defaults never decide a video), so the manifest
describes exactly what was rendered; a line's image goes as the API's `input_reference` file
part (multipart/form-data, as OpenAI's SDK sends it). Downloads are written aside, checked (every
byte the server announced, every frame decodes) and fsynced, then renamed, as write_mp4 does.

Transient answers are retried with exponential backoff: a connection that fails or is cut short
(including a download cut short), 500, 502, 503 and 504, and 429. Each call is retried at most
RETRIES times, waiting BACKOFF_S doubled each time (at most MAX_BACKOFF_S), or the server's
Retry-After (at most MAX_RETRY_AFTER_S) when it sends one: about a minute at most per call
without Retry-After. A 429 on create (the server's queue is full) holds every new create for
its Retry-After and does not count while jobs of this run are in flight (they make room); the
line fails only after RETRIES of them in a row with nothing of ours in flight.

Every create of a line carries one Idempotency-Key, made for that line in this run: a retry after
a connection that dropped before the answer came gets the job the first try made, never a second
one (servers from before the header ignore it).
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from pathlib import Path

from ..errors import UserInputError
from ..fields import api_fields
from ..video import VideoWriteError, fsync_file, publish, temp_name, verify_mp4
from . import multipart
from .batch import Batch
from .inputs import line_image
from .prompts import RenderLine

POLL_S = 0.2
TIMEOUT_S = 60
UNREACHABLE_POLLS = 3  # polls in a row (each already retried RETRIES times) that reached no server
RETRIES = 5  # extra tries of one call after a transient failure
BACKOFF_S = 1.0  # the first wait; doubled after every retry
MAX_BACKOFF_S = 16.0
MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is cut to this
TRANSIENT = (0, 429, 500, 502, 503, 504)  # 0: no HTTP answer (refused, reset, timed out, cut short)


class ApiFailure(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def model_identity(endpoint: str) -> str:
    """The model part of a line's key: videos from a server are keyed by its URL."""
    return f"endpoint {endpoint.rstrip('/')}"


def create_body(line: RenderLine) -> dict:
    """The line's generation fields under their API names; a field at one of its `absent` values
    (none given; cache none) is left out, so that servers from before it existed take the line."""
    s = line.settings
    body = {spec.api: spec.to_api(s[spec.name]) for spec in api_fields() if s.get(spec.name) not in spec.absent}
    return dict(body, size=f"{s['width']}x{s['height']}")


def create_request(line: RenderLine) -> tuple[bytes, str]:
    """The POST /v1/videos body and its Content-Type: JSON; multipart/form-data when the line
    has an image, sent as the API's `input_reference` file part, as OpenAI's SDK sends it.
    UserInputError when the image changed since the prompts file was read."""
    fields = create_body(line)
    image = line_image(line.settings)
    if image is None:
        return json.dumps(fields).encode(), "application/json"
    media_type, suffix = multipart.image_type(image)
    return multipart.encode(fields, {"input_reference": (f"{line.name}.{suffix}", image, media_type)})


def backoff(retry: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number `retry` (0-based): the server's Retry-After when given."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), MAX_RETRY_AFTER_S)
    return min(BACKOFF_S * 2 ** retry, MAX_BACKOFF_S)


class RemoteRunner:
    def __init__(self, endpoint: str, api_key: str | None = None, max_in_flight: int = 4,
                 sleep=time.sleep):
        self.base = endpoint.rstrip("/")
        self.api_key, self.max_in_flight = api_key, max_in_flight
        self.sleep = sleep
        self._misses: dict[str, int] = {}  # video id -> polls in a row that reached no server

    def __call__(self, lines: list[RenderLine], out_dir: Path, batch: Batch) -> None:
        self._check_reachable()
        # (line, its Idempotency-Key); video id -> (line, time submitted)
        waiting, in_flight = deque((line, f"pipedit-render-{uuid.uuid4().hex}") for line in lines), {}
        hold_until, full = 0.0, 0  # no create before hold_until; 429s in a row with nothing in flight
        while waiting or in_flight:
            while waiting and len(in_flight) < self.max_in_flight and time.monotonic() >= hold_until:
                line, retry_key = waiting.popleft()
                try:
                    video = self._call("POST", "/v1/videos", create_request(line), retry_429=False,
                                       headers={"Idempotency-Key": retry_key})
                except UserInputError as error:
                    batch.finished(line, error=str(error))
                    continue
                except ApiFailure as error:
                    if error.status == 429:  # queue full: retry this line after Retry-After
                        full = full + 1 if not in_flight else 0
                        if full <= RETRIES:
                            waiting.appendleft((line, retry_key))
                            hold_until = time.monotonic() + backoff(full, error.retry_after)
                            break
                    batch.finished(line, error=f"the server refused it: {error}")
                    continue
                full = 0
                in_flight[video["id"]] = (line, time.perf_counter())
            for video_id, (line, began) in list(in_flight.items()):
                if self._poll(video_id, line, began, out_dir, batch):
                    del in_flight[video_id]
            self.sleep(POLL_S)

    def _poll(self, video_id: str, line: RenderLine, began: float, out_dir: Path, batch: Batch) -> bool:
        """True once the job has ended (its outcome reported)."""
        try:
            video = self._call("GET", f"/v1/videos/{video_id}")
            if video["status"] == "completed":
                self._download(video_id, out_dir / line.file_name, line.settings["num_frames"])
                batch.finished(line, timings=video["pipedit"].get("timings", {}),
                               latency_s=time.perf_counter() - began)
                return True
        except VideoWriteError as error:
            batch.write_failed(line, error)
            return True
        except ApiFailure as error:
            # A server restarting keeps its jobs (they live in its store): wait for it a while.
            misses = self._misses[video_id] = self._misses.get(video_id, 0) + 1
            if error.status == 0 and misses < UNREACHABLE_POLLS:
                return False
            batch.finished(line, error=f"job {video_id}: {error}")
            return True
        self._misses.pop(video_id, None)
        if video["status"] in ("failed", "cancelled"):
            message = (video.get("error") or {}).get("message", video["status"])
            batch.finished(line, error=f"job {video_id} {video['status']}: {message}")
            return True
        extras = video["pipedit"]
        if extras.get("stage") == "denoising":
            batch.step(line, extras["step"], extras["total_steps"])
        return False

    def _download(self, video_id: str, target: Path, frames: int) -> None:
        """The job's mp4 under `target`, complete and checked, or VideoWriteError (ApiFailure when
        the server kept failing)."""
        for retry in range(RETRIES + 1):
            data = self._call("GET", f"/v1/videos/{video_id}/content", raw=True)
            partial = temp_name(target)
            try:
                with open(partial, "wb") as file:
                    file.write(data)
                fsync_file(partial)
                verify_mp4(partial, frames)
            except VideoWriteError as error:
                partial.unlink(missing_ok=True)
                if error.errno == errno.ENOSPC or retry == RETRIES:  # a new download cannot help
                    raise
                self.sleep(backoff(retry, None))  # a body short of frames: fetch it again
                continue
            except OSError as error:
                partial.unlink(missing_ok=True)
                raise VideoWriteError(os.strerror(error.errno) if error.errno else str(error), error.errno) from None
            publish(partial, target)
            return

    def _check_reachable(self) -> None:
        try:
            self._call("GET", "/healthz", retries=0)
        except ApiFailure as error:
            if error.status == 0:
                raise UserInputError(f"cannot reach {self.base}: {error}; start `pipedit serve` "
                                     f"or fix --endpoint") from None
            # Any HTTP answer means a server is there; an unhealthy one fails the jobs it refuses.

    def _call(self, method: str, path: str, body: tuple[bytes, str] | None = None, raw: bool = False,
              retries: int = RETRIES, retry_429: bool = True, headers: dict | None = None):
        """The answer's JSON (bytes if raw); transient failures retried (see the module's doc)."""
        for retry in range(retries + 1):
            try:
                return self._once(method, path, body, raw, headers or {})
            except ApiFailure as error:
                if error.status not in TRANSIENT or retry == retries or (error.status == 429 and not retry_429):
                    raise
                self.sleep(backoff(retry, error.retry_after))

    def _once(self, method: str, path: str, body: tuple[bytes, str] | None, raw: bool, headers: dict):
        """`body`: (bytes, Content-Type), as create_request builds it; `headers`: more to send."""
        headers = dict(headers, **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}))
        data = None
        if body is not None:
            data, headers["Content-Type"] = body
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise ApiFailure(error.code, _error_message(error), _retry_after(error.headers)) from None
        except http.client.IncompleteRead as error:
            raise ApiFailure(0, f"the answer was cut short ({len(error.partial)} bytes received, "
                                f"{error.expected} more expected)") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            raise ApiFailure(0, str(getattr(error, "reason", error)) or type(error).__name__) from None
        if raw:
            return payload
        try:
            return json.loads(payload)
        except ValueError:
            raise ApiFailure(0, f"the answer to {method} {path} is not JSON (cut short?)") from None


def _retry_after(headers) -> float | None:
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: use the backoff


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        return f"{error.code} {json.loads(error.read())['error']['message']}"
    except (ValueError, KeyError, TypeError, OSError, http.client.HTTPException):
        return f"HTTP {error.code}"
