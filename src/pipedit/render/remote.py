"""Rendering through a running `pipedit serve` (its /v1/videos API), at most N jobs in flight.

Every setting is sent explicitly (the server's defaults never decide a video), so the manifest
describes exactly what was rendered. Downloads are written aside and renamed, as write_mp4 does.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from ..errors import UserInputError
from .batch import Batch
from .prompts import RenderLine

POLL_S = 0.2
TIMEOUT_S = 60
UNREACHABLE_POLLS = 50  # consecutive failed polls (about 10 s) before a job counts as lost


class ApiFailure(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def model_identity(endpoint: str) -> str:
    """The model part of a line's key: videos from a server are keyed by its URL."""
    return f"endpoint {endpoint.rstrip('/')}"


def create_body(line: RenderLine) -> dict:
    s = line.settings
    return {"prompt": s["prompt"], "size": f"{s['width']}x{s['height']}", "num_frames": s["num_frames"],
            "num_inference_steps": s["steps"], "seed": s["seed"], "guidance_scale": s["guidance_scale"],
            "fps": s["fps"]}


class RemoteRunner:
    def __init__(self, endpoint: str, api_key: str | None = None, max_in_flight: int = 4):
        self.base = endpoint.rstrip("/")
        self.api_key, self.max_in_flight = api_key, max_in_flight
        self._misses: dict[str, int] = {}  # video id -> polls in a row that reached no server

    def __call__(self, lines: list[RenderLine], out_dir: Path, batch: Batch) -> None:
        self._check_reachable()
        waiting, in_flight = deque(lines), {}  # video id -> (line, time submitted)
        while waiting or in_flight:
            while waiting and len(in_flight) < self.max_in_flight:
                line = waiting.popleft()
                try:
                    video = self._call("POST", "/v1/videos", create_body(line))
                except ApiFailure as error:
                    if error.status == 429:  # queue full: retry this line once jobs have finished
                        waiting.appendleft(line)
                        break
                    batch.finished(line, error=f"the server refused it: {error}")
                    continue
                in_flight[video["id"]] = (line, time.perf_counter())
            for video_id, (line, began) in list(in_flight.items()):
                if self._poll(video_id, line, began, out_dir, batch):
                    del in_flight[video_id]
            time.sleep(POLL_S)

    def _poll(self, video_id: str, line: RenderLine, began: float, out_dir: Path, batch: Batch) -> bool:
        """True once the job has ended (its outcome reported)."""
        try:
            video = self._call("GET", f"/v1/videos/{video_id}")
            if video["status"] == "completed":
                self._download(video_id, out_dir / line.file_name)
                batch.finished(line, timings=video["pipedit"].get("timings", {}),
                               latency_s=time.perf_counter() - began)
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

    def _download(self, video_id: str, target: Path) -> None:
        data = self._call("GET", f"/v1/videos/{video_id}/content", raw=True)
        partial = target.with_name(f".{target.name}.partial.mp4")
        partial.write_bytes(data)
        os.replace(partial, target)

    def _check_reachable(self) -> None:
        try:
            self._call("GET", "/healthz")
        except ApiFailure as error:
            if error.status == 0:
                raise UserInputError(f"cannot reach {self.base}: {error}; start `pipedit serve` "
                                     f"or fix --endpoint") from None
            # Any HTTP answer means a server is there; an unhealthy one fails the jobs it refuses.

    def _call(self, method: str, path: str, body: dict | None = None, raw: bool = False):
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise ApiFailure(error.code, _error_message(error)) from None
        except (urllib.error.URLError, OSError) as error:
            raise ApiFailure(0, str(getattr(error, "reason", error))) from None
        return payload if raw else json.loads(payload)


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        return f"{error.code} {json.loads(error.read())['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {error.code}"
