"""`pipedit render --endpoint` against a flaky server (http.server in a thread): a 429 with
Retry-After is honoured (no re-post before it), a 503 is retried with backoff, a download cut
short is fetched again, and the line ends done with the whole video."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from render_helpers import read_manifest, write_jsonl

from pipedit.cli import main
from pipedit.render import remote
from pipedit.video import read_mp4, write_mp4

VIDEO_ID = "video_" + "0" * 32


class Flaky(BaseHTTPRequestHandler):
    """Create: 429 (Retry-After: 1), then 503, then accepted. Content: cut short once, then whole."""

    mp4 = b""
    log: list = []
    keys: list = []  # the Idempotency-Key of every create
    answers: dict = {}

    def log_message(self, *args):
        pass

    def _json(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.log.append((time.monotonic(), "GET", self.path))
        if self.path == "/healthz":
            return self._json(200, {"status": "ok"})
        if self.path.endswith("/content"):
            answer = self.answers["GET /content"].pop(0) if len(self.answers["GET /content"]) > 1 else "whole"
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Content-Length", str(len(self.mp4)))
            self.end_headers()
            self.wfile.write(self.mp4 if answer == "whole" else self.mp4[: len(self.mp4) // 3])
            self.close_connection = True
            return
        return self._json(200, {"id": VIDEO_ID, "status": "completed", "pipedit": {"timings": {"denoise_s": 0.1}}})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.log.append((time.monotonic(), "POST", self.path))
        self.keys.append(self.headers.get("Idempotency-Key"))
        status = self.answers["POST /v1/videos"].pop(0)
        if status == 429:
            error = {"error": {"message": "the queue is full", "type": "x", "param": None, "code": "queue_full"}}
            return self._json(429, error, headers=[("Retry-After", "1")])
        if status == 503:
            error = {"error": {"message": "restarting", "type": "server_error", "param": None, "code": "x"}}
            return self._json(503, error)
        return self._json(200, {"id": VIDEO_ID, "status": "queued"})


@pytest.fixture
def flaky(tmp_path):
    Flaky.mp4 = write_mp4(torch.rand(5, 16, 16, 3), tmp_path / "source.mp4", fps=8).read_bytes()
    Flaky.log, Flaky.keys = [], []
    Flaky.answers = {"POST /v1/videos": [429, 503, 200], "GET /content": ["short", "whole"]}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_render_rides_out_429_503_and_a_cut_short_download(tmp_path, flaky, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl",
                          [{"name": "fox", "prompt": "a fox", "size": "16x16", "num_frames": 5, "steps": 1}])
    out_dir = tmp_path / "out"
    assert main(["render", str(prompts), "--out-dir", str(out_dir), "--endpoint", flaky]) == 0
    posts = [at for at, method, _ in Flaky.log if method == "POST"]
    assert len(posts) == 3  # 429, 503, accepted: no stream of re-posts
    assert posts[1] - posts[0] >= 0.95  # Retry-After: 1 honoured
    assert posts[2] - posts[1] >= remote.BACKOFF_S * 0.95  # backoff after the 503
    # One key for the line's every try: a retry whose first answer was lost cannot make a second job.
    assert len(set(Flaky.keys)) == 1 and Flaky.keys[0].startswith("pipedit-render-")
    downloads = [path for _, method, path in Flaky.log if path.endswith("/content")]
    assert len(downloads) == 2  # the cut-short one, then the whole one
    assert (out_dir / "fox.mp4").read_bytes() == Flaky.mp4 and read_mp4(out_dir / "fox.mp4").shape == (5, 16, 16, 3)
    (entry,) = read_manifest(out_dir)
    assert entry["status"] == "done" and entry["bytes"] == len(Flaky.mp4)
    assert sorted(p.name for p in out_dir.iterdir()) == ["fox.mp4", "manifest.jsonl"]


def test_backoff_is_bounded_and_honours_retry_after():
    assert [remote.backoff(n, None) for n in range(6)] == [1, 2, 4, 8, 16, 16]
    assert remote.backoff(0, 3.0) == 3.0 and remote.backoff(0, 3600) == remote.MAX_RETRY_AFTER_S


def test_a_server_that_keeps_failing_fails_the_line_after_the_retries(tmp_path, flaky, monkeypatch):
    Flaky.answers["POST /v1/videos"] = [503] * (remote.RETRIES + 1)
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    prompts = write_jsonl(tmp_path / "prompts.jsonl",
                          [{"name": "fox", "prompt": "a fox", "size": "16x16", "num_frames": 5, "steps": 1}])
    assert main(["render", str(prompts), "--out-dir", str(tmp_path / "out"), "--endpoint", flaky]) == 1
    (entry,) = read_manifest(tmp_path / "out")
    assert entry["status"] == "failed" and "503 restarting" in entry["error"]
    assert sum(1 for _, method, _ in Flaky.log if method == "POST") == remote.RETRIES + 1
