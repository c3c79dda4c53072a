"""An app over a JobService whose engine runs nothing (IdleEngine), served on loopback, for tests
of the HTTP layer: tenants, hostile input, cross-site requests. Plus a raw HTTP/1.1 client for
requests urllib cannot send (bodies it would not send whole, chunked bodies)."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

from pipedit.config import GenerationDefaults
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobStore
from serve_helpers import IdleEngine, Running, serve_in_thread


def start_idle(folder: Path, *, limits: ServiceLimits = ServiceLimits(), store: JobStore | None = None,
               retention: float | None = None, **app_options) -> Running:
    """`app_options`: build_app's (api_keys, admin_keys, host, allowed_hosts)."""
    extra = {} if retention is None else {"retention": retention}
    engine = IdleEngine()
    service = JobService(engine, store or JobStore.in_folder(folder), folder, "demo",
                         GenerationDefaults(64, 64, 5, 2), limits, **extra)
    url, stop = serve_in_thread(build_app(service, **app_options))
    return Running(engine, service, url, stop)


def raw_request(url: str, head: str, body_parts: list[bytes] = (), timeout: float = 30) -> tuple[int, bytes]:
    """Sends `head` (request line and headers, without the blank line) and then `body_parts` as
    they are; returns the status and the response's body (read until the server closes or the
    Content-Length is complete)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as conn:
        conn.sendall(head.rstrip("\r\n").encode() + b"\r\n\r\n")
        for part in body_parts:
            try:
                conn.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server has answered and closed: read what it said
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _expected(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    head_text, _, payload = data.partition(b"\r\n\r\n")
    return int(head_text.split()[1]), payload


def _expected(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return 1 << 62


def asgi_request(app, method: str, path: str, headers: dict | None = None, body: bytes = b"",
                 on_start=None) -> tuple[int, dict, bytes]:
    """One request straight into an ASGI app, no socket: (status, headers with lower-case names, body).
    `on_start()` runs when the response's headers are sent, before any of its body."""
    import asyncio

    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in {"host": "127.0.0.1", **(headers or {})}.items()]
    path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "headers": raw,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "root_path": ""}
    sent = {"body": False}
    out: dict = {"status": None, "headers": {}, "body": b""}

    async def receive():
        if not sent["body"]:
            sent["body"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # no disconnect while the app answers

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message["headers"]}
            if on_start is not None:
                on_start()
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    asyncio.run(app(scope, receive, send))
    return out["status"], out["headers"], out["body"]
