"""HTTP edges the review found, on a live uvicorn server with pipedit's protocol (the suite's idle
app): several Host headers, an https Origin on a plain-HTTP server, `Expect: 100-continue` on a
body over the cap, and two requests pipelined on one connection."""

import socket
import time
from urllib.parse import urlsplit

import pytest

from idle_app import raw_request, start_idle
from pipedit.serve.http.body_caps import BodyCaps
from pipedit.serve.http.header_timeout import protocol_class
from serve_helpers import HEADER_TIMEOUT_S, call, serve_in_thread


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    running = start_idle(tmp_path_factory.mktemp("edges"))
    yield running
    running.close()


def _exchange(url: str, data: bytes, wait_s: float = 5.0) -> tuple[bytes, bool]:
    """Sends `data` on one connection; what came back within `wait_s`, and whether the server
    closed the connection."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=wait_s) as conn:
        conn.sendall(data)
        got, deadline = b"", time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                chunk = conn.recv(65536)
            except socket.timeout:
                return got, False
            if not chunk:
                return got, True
            got += chunk
    return got, False


def test_two_host_headers_are_refused(app):
    # The review: Host 127.0.0.1 then evil.example passed, only the first being checked.
    status, body = raw_request(app.url, "GET /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
                                        "Connection: close")
    assert status == 400 and b"host_not_allowed" in body and b"several Host headers" in body
    assert raw_request(app.url, "GET /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close")[0] == 200


def test_an_origin_of_the_other_scheme_is_another_origin(app):
    port = urlsplit(app.url).port
    reply = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers={"Origin": f"https://127.0.0.1:{port}"})
    assert reply.status == 403 and reply.json()["error"]["code"] == "cross_site_request", reply.body
    assert call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"},
                headers={"Origin": f"http://127.0.0.1:{port}"}).status == 200
    # Behind a proxy that ends TLS (and says so), the page's https origin is the server's own.
    behind_tls = {"Origin": "https://127.0.0.1", "Host": "127.0.0.1", "X-Forwarded-Proto": "https"}
    assert call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers=behind_tls).status == 200


def test_a_body_over_the_cap_is_refused_without_inviting_it(app):
    head = (b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2000000\r\nExpect: 100-continue\r\n\r\n")
    got, closed = _exchange(app.url, head)
    assert got.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in got and b"body_too_large" in got, got[:200]
    assert closed


def test_a_request_pipelined_behind_another_closes_the_connection_after_the_first(app):
    # The review: of two pipelined requests only the first was answered, the second left waiting.
    # The first is answered with Connection: close and the connection closes: the client knows to
    # send the second again.
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    got, closed = _exchange(app.url, request + request.replace(b"/healthz", b"/v1/videos"))
    assert got.count(b"HTTP/1.1 ") == 1 and got.startswith(b"HTTP/1.1 200 "), got
    assert b"connection: close" in got.lower() and closed
    got, closed = _exchange(app.url, request, wait_s=1.0)  # one at a time: kept alive, as before
    assert got.startswith(b"HTTP/1.1 200 ") and not closed


async def _eager_reader(scope, receive, send):
    """Reads the body first, as Ray Serve's proxy does with every request (uvicorn then sends
    100 Continue at that first read), then answers 200."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("caps", [None, BodyCaps(1 << 20, 20 << 20)], ids=["app-only", "proxy-caps"])
def test_behind_a_proxy_that_reads_every_body_the_protocol_refuses_before_inviting(caps):
    # The review's `Expect: 100-continue` with 2 MB came back 100 Continue, then 413: Serve's proxy
    # reads the body before pipedit's app can refuse it. With the caps the protocol answers first.
    url, stop = serve_in_thread(_eager_reader, protocol_class(HEADER_TIMEOUT_S, body_caps=caps))
    try:
        head = (b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2000000\r\nExpect: 100-continue\r\n\r\n")
        got, _ = _exchange(url, head, wait_s=2.0)
        if caps is None:  # what the proxy did without them: the body invited
            assert got.startswith(b"HTTP/1.1 100 Continue"), got[:200]
            return
        assert got.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in got and b"body_too_large" in got, got[:300]
        assert b"serve.max_body_bytes" in got
        upload = (b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
                  b"Content-Length: 2000000\r\nExpect: 100-continue\r\n\r\n")  # under serve.max_upload_bytes
        assert _exchange(url, upload, wait_s=1.0)[0].startswith(b"HTTP/1.1 100 Continue")
    finally:
        stop()
