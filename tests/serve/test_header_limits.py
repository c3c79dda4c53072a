"""Header floods (serve.max_header_bytes, serve.max_header_lines): the review sent ~4,000 header
lines of 65,000 bytes on one connection and got 200, while Serve's proxy grew by 770 MB. The
protocol every test server runs (Serve's proxies get the same one: test_hostile_input.py) answers
431 and closes; a connection keeps at most the cap plus one chunk; normal requests pass."""

import asyncio
import json
import socket
from urllib.parse import urlsplit

import pytest

from pipedit.config import ServeConfig
from pipedit.errors import UserInputError
from pipedit.serve.http.body_caps import BodyCaps
from pipedit.serve.http.header_timeout import MAX_HEADER_BYTES, MAX_HEADER_LINES, protocol_class
from idle_app import start_idle
from serve_helpers import call


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    running = start_idle(tmp_path_factory.mktemp("floods"))
    yield running
    running.close()


def _send_and_read(url: str, data: bytes) -> bytes:
    """Sends `data` (as much as the server reads), then reads until the server closes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as conn:
        try:
            conn.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and stopped reading
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def _refused(answer: bytes) -> dict:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431") and b"connection: close" in head.lower(), head
    error = json.loads(body)["error"]
    assert error["code"] == "headers_too_large" and "serve.max_header_bytes" in error["message"], error
    return error


def test_a_header_flood_gets_431_and_the_connection_closes(app):
    # Scaled down: 40 lines of 65,000 bytes (2.6 MB) instead of 4,000; the server reads until the
    # cap, answers, drops the rest and closes (recv ends: the loop in _send_and_read returns).
    line = b"X-Flood: " + b"a" * 65000 + b"\r\n"
    _refused(_send_and_read(app.url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + line * 40 + b"\r\n"))
    # One header over the cap (1 MB), and too many small lines (2,000), are refused the same way.
    _refused(_send_and_read(app.url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * (1 << 20)
                            + b"\r\n\r\n"))
    _refused(_send_and_read(app.url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            + b"".join(b"X-%d: 1\r\n" % i for i in range(2000)) + b"\r\n"))
    assert call("GET", f"{app.url}/healthz").status == 200


def test_requests_under_the_caps_pass(app):
    # A big cookie (40 KB) and 60 header lines are fine; so is a body of any size the route takes.
    headers = {"Cookie": "c=" + "x" * 40000, **{f"X-Extra-{i}": str(i) for i in range(60)}}
    assert call("GET", f"{app.url}/healthz", headers=headers).status == 200
    created = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox " * 600})
    assert created.status == 200, created.body


class _Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.written, self.closing, self.eof = b"", False, False

    def write(self, data):
        self.written += data

    def can_write_eof(self):
        return True

    def write_eof(self):
        self.eof = True

    def close(self):
        self.closing = True

    def is_closing(self):
        return self.closing

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5), "sockname": ("127.0.0.1", 80)}.get(name, default)


def test_a_flooded_connection_keeps_no_more_than_the_cap():
    # The protocol alone (uvicorn's, no server): 300 chunks of 64 KiB (19 MB) of one request's
    # headers. Parsing stops at the cap; later chunks are dropped unread (never reach the parser,
    # which keeps a header's bytes until its end), and the app never sees a request.
    import uvicorn
    from uvicorn.server import ServerState

    called = []

    async def app(scope, receive, send):
        called.append(scope)

    async def flood():
        config = uvicorn.Config(app, log_level="warning")
        protocol = protocol_class(5.0)(config, ServerState(), {}, asyncio.get_running_loop())
        transport = _Transport()
        protocol.connection_made(transport)
        fed = []
        real_feed = protocol.parser.feed_data
        protocol.parser = type("Parser", (), {"feed_data": lambda _, data: (fed.append(len(data)), real_feed(data)),
                                              "__getattr__": lambda _, name: getattr(real_feed.__self__, name)})()
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flood: ")
        for _ in range(300):
            protocol.data_received(b"a" * 65536)
        protocol.connection_lost(None)
        return transport, fed

    transport, fed = asyncio.run(flood())
    assert sum(fed) <= MAX_HEADER_BYTES + 65536 + 100, sum(fed)
    assert transport.written.startswith(b"HTTP/1.1 431") and transport.eof
    assert not called


def test_the_caps_are_serve_settings():
    assert (ServeConfig().max_header_bytes, ServeConfig().max_header_lines) == (MAX_HEADER_BYTES, MAX_HEADER_LINES)
    with pytest.raises(UserInputError, match="serve.max_header_lines must be a positive integer"):
        ServeConfig(max_header_lines=0)


def test_serve_proxies_get_the_caps_from_the_environment(monkeypatch):
    from pipedit.serve import header_timeout

    variables = header_timeout.environment(7.5, 1000, 10)
    assert variables[header_timeout.MAX_BYTES_ENV] == "1000" and variables[header_timeout.MAX_LINES_ENV] == "10"
    assert header_timeout.MAX_BODY_ENV not in variables  # no body caps given: the app alone caps bodies
    with_bodies = header_timeout.environment(7.5, body_caps=BodyCaps(100, 1000))
    assert (with_bodies[header_timeout.MAX_BODY_ENV], with_bodies[header_timeout.MAX_UPLOAD_ENV]) == ("100", "1000")
    for name, value in with_bodies.items():
        monkeypatch.setenv(name, value)
    installed = []
    monkeypatch.setattr(header_timeout, "use_http_protocol", installed.append)
    header_timeout.install()
    assert installed and installed[0].__name__ == "HeaderTimeoutProtocol"
    assert header_timeout._body_caps() == BodyCaps(100, 1000)
