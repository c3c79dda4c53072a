"""Requests meant to break the server get a 4xx (or 503) with OpenAI's error body, never a 500:
a lone surrogate in the prompt, a stored row that UTF-8 cannot carry, JSON nested 100000 deep,
bodies over serve.max_body_bytes (announced or chunked), a request over serve.max_pixels, and a
store another process holds locked. And the Video's expires_at follows serve.retention."""

import json
import socket
import sqlite3
import time

import pytest

from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobRecord, JobStore
from idle_app import raw_request, start_idle
from serve_helpers import call

CAP = ServiceLimits().max_body_bytes
PARAMS = {"prompt": "a fox", "width": 64, "height": 64, "num_frames": 5, "fps": 24, "num_inference_steps": 2,
          "guidance_scale": 6.0, "seed": 1, "seconds": "0.208"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    # A short body time limit, for the slow-client tests (a trickled body is refused after it).
    running = start_idle(tmp_path_factory.mktemp("hostile"), limits=ServiceLimits(max_queued=1000, body_timeout_s=1.0))
    yield running
    running.close()


def _error(reply, status, code, param=None):
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error
    return error


def test_a_lone_surrogate_in_the_prompt_is_refused_before_it_is_stored(app):
    before = app.service.store.count("queued")
    reply = call("POST", f"{app.url}/v1/videos", data=b'{"prompt": "a \\ud800 fox"}',
                 headers={"Content-Type": "application/json"})
    error = _error(reply, 400, "invalid_prompt", "prompt")
    assert "surrogate" in error["message"]
    assert app.service.store.count("queued") == before
    _error(call("POST", f"{app.url}/v1/videos", data=b'{"prompt": "a fox", "size": "64x64\\udc00"}',
                headers={"Content-Type": "application/json"}), 400, "invalid_value", "size")
    assert call("GET", f"{app.url}/v1/videos").status == 200
    # A proper pair (an emoji written as two escapes) is text, and is taken.
    ok = call("POST", f"{app.url}/v1/videos", data=b'{"prompt": "a \\ud83e\\udd8a"}',
              headers={"Content-Type": "application/json"})
    assert ok.status == 200 and ok.json()["prompt"] == "a \U0001f98a"


def test_a_stored_row_utf8_cannot_carry_never_fails_a_read(app):
    app.service.store.add(JobRecord(id="video_surrogate", status="failed", created_at=time.time(),
                                    params=dict(PARAMS, prompt="a \ud800 fox"), extras={"stage": "failed"},
                                    error={"code": "x", "message": "bad \udfff"}))
    listed = call("GET", f"{app.url}/v1/videos?limit=100")
    assert listed.status == 200, listed.body
    video = next(v for v in listed.json()["data"] if v["id"] == "video_surrogate")
    assert video["prompt"] == "a \ufffd fox" and video["error"]["message"] == "bad \ufffd"
    assert call("GET", f"{app.url}/v1/videos/video_surrogate").json()["prompt"] == "a \ufffd fox"
    # A row that does not make a Video at all is shown as failed, not as a 500 for every list.
    app.service.store.add(JobRecord(id="video_damaged", status="queued", created_at=time.time(), params={}))
    listed = call("GET", f"{app.url}/v1/videos?limit=100")
    assert listed.status == 200, listed.body
    damaged = next(v for v in listed.json()["data"] if v["id"] == "video_damaged")
    assert damaged["status"] == "failed" and damaged["error"]["code"] == "unreadable_job"
    for video_id in ("video_surrogate", "video_damaged"):
        assert call("DELETE", f"{app.url}/v1/videos/{video_id}").status == 200


def _multipart(fields: dict[str, bytes], boundary: str = "b0undary") -> bytes:
    parts = [b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary.encode(), name.encode(), value)
             for name, value in fields.items()]
    return b"".join(parts) + b"--%s--\r\n" % boundary.encode()


def test_multipart_text_that_is_not_utf8_is_refused_naming_the_field(app):
    # The review's prompt, sent as multipart: it was stored as 'ÿþ latin1 été'.
    form = {"Content-Type": "multipart/form-data; boundary=b0undary"}
    before = app.service.store.count("queued")
    reply = call("POST", f"{app.url}/v1/videos", data=_multipart({"prompt": b"\xff\xfe latin1 \xe9t\xe9"}), headers=form)
    error = _error(reply, 400, "invalid_prompt", "prompt")
    assert "UTF-8" in error["message"] and "0xff" in error["message"]
    reply = call("POST", f"{app.url}/v1/videos", headers=form,
                 data=_multipart({"prompt": b"a fox", "negative_prompt": b"blurry \xe9"}))
    assert "UTF-8" in _error(reply, 400, "invalid_value", "negative_prompt")["message"]
    assert app.service.store.count("queued") == before
    ok = call("POST", f"{app.url}/v1/videos", data=_multipart({"prompt": "a fox in the snow, été".encode()}), headers=form)
    assert ok.status == 200 and ok.json()["prompt"] == "a fox in the snow, été"


def test_a_malformed_multipart_body_is_invalid_body(app):
    for content_type, body in (("multipart/form-data", _multipart({"prompt": b"a fox"})),  # no boundary
                               ("multipart/form-data; boundary=b0undary", b"--b0undary\r\nContent-Disposition: "
                                b"form-data\r\n\r\na fox\r\n--b0undary--\r\n"),  # a part without a name
                               ("multipart/form-data; boundary=b0undary", b"\x00not multipart at all")):
        reply = call("POST", f"{app.url}/v1/videos", data=body, headers={"Content-Type": content_type})
        assert "multipart" in _error(reply, 400, "invalid_body")["message"], body


def test_json_nested_100000_deep_is_400(app):
    for body in (b"[" * 100_000, b'{"prompt": ' + b"[" * 100_000):
        _error(call("POST", f"{app.url}/v1/videos", data=body, headers={"Content-Type": "application/json"}),
               400, "invalid_body")
    assert call("GET", f"{app.url}/healthz").status == 200


def test_a_body_announced_over_the_cap_is_refused_before_it_is_read(app):
    # The review's 300 MB multipart upload: the headers alone get the 413 (no body byte is sent). A
    # multipart create may upload an image: its cap is serve.max_upload_bytes.
    status, body = raw_request(app.url, "POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 300000000")
    assert status == 413 and b"body_too_large" in body and b"serve.max_upload_bytes" in body
    status, body = raw_request(app.url, f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               f"Content-Type: application/json\r\nContent-Length: {CAP + 1}")
    assert status == 413 and b"body_too_large" in body


def test_a_chunked_body_just_over_the_cap_is_413(app):
    data = b'{"prompt": "a fox"' + b" " * (CAP - 18) + b"}"  # CAP + 1 bytes of valid JSON
    assert len(data) == CAP + 1
    chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]
    status, body = raw_request(app.url, "POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "Content-Type: application/json\r\nTransfer-Encoding: chunked",
                               [b"%x\r\n%s\r\n" % (len(c), c) for c in chunks] + [b"0\r\n\r\n"])
    assert status == 413 and b"body_too_large" in body, body


def test_a_body_at_the_cap_is_read(app):
    data = b'{"prompt": "a fox"' + b" " * (CAP - 19) + b"}"
    assert len(data) == CAP
    reply = call("POST", f"{app.url}/v1/videos", data=data, headers={"Content-Type": "application/json"})
    assert reply.status == 200, reply.body


def test_pixels_are_capped_whatever_the_steps(app):
    # Under max_cost at 6 steps, yet 7.9x the pixels of 1280x720x129.
    error = _error(call("POST", f"{app.url}/v1/videos", {"prompt": "a fox", "size": "1920x1920", "num_frames": 257,
                                                          "num_inference_steps": 6}), 400, "too_many_pixels", "size")
    assert "serve.max_pixels" in error["message"] and f"{ServiceLimits().max_pixels:,}" in error["message"]
    error = _error(call("POST", f"{app.url}/v1/videos", {"prompt": "a fox", "size": "1280x720", "num_frames": 129,
                                                          "num_inference_steps": 51}), 400, "cost_too_high", "size")
    assert "serve.max_cost" in error["message"]


def test_a_locked_sqlite_store_is_503_server_busy(tmp_path):
    store = JobStore.in_folder(tmp_path, busy_timeout_s=0.2)
    app = start_idle(tmp_path, store=store)
    holder = sqlite3.connect(tmp_path / "jobs.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process's long write
        started = time.monotonic()
        reply = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"})
        error = _error(reply, 503, "server_busy")
        assert int(reply.headers["retry-after"]) >= 1 and "retry" in error["message"]
        assert time.monotonic() - started < 5
        holder.execute("ROLLBACK")
        assert call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}).status == 200
    finally:
        holder.close()
        app.close()


def test_expires_at_follows_the_retention(tmp_path):
    now = time.time()
    for retention, expected in ((3600.0, int(now + 3600)), (0.0, None)):
        app = start_idle(tmp_path / str(retention), retention=retention)
        try:
            app.service.store.add(JobRecord(id="video_done", status="completed", created_at=now - 5, params=PARAMS,
                                            completed_at=now, extras={"stage": "done"}))
            app.service.store.add(JobRecord(id="video_waits", status="queued", created_at=now, params=PARAMS,
                                            extras={"stage": "queued"}))
            assert call("GET", f"{app.url}/v1/videos/video_done").json()["expires_at"] == expected
            assert call("GET", f"{app.url}/v1/videos/video_waits").json()["expires_at"] is None
        finally:
            app.close()


def _answer_to_a_body_still_being_sent(url, head: str, body: bytes) -> tuple[str | None, bytes]:
    """Sends `head` and then all of `body` as one client does that writes its whole request before
    reading (urllib, the openai SDK); returns (the error sending or reading met, what was read)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as conn:
        try:
            conn.sendall(head.encode() + b"\r\n\r\n")
            conn.sendall(body)
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            return None, data
        except OSError as error:
            return type(error).__name__, b""


def test_an_oversized_body_is_answered_so_a_client_still_sending_can_read_it(app):
    # The review: 20 MB of JSON, Content-Length over the cap: 8 of 8 clients got "connection reset"
    # instead of the 413 (the answer came, then the socket closed with the body unread).
    body = b'{"prompt": "' + b"a" * (20 << 20) + b'"}'
    for _ in range(8):
        error, data = _answer_to_a_body_still_being_sent(
            app.url, f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Connection: close\r\nContent-Length: {len(body)}", body)
        assert error is None, error
        head, _, answer = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower(), head
        assert json.loads(answer)["error"]["code"] == "body_too_large"
    assert call("GET", f"{app.url}/healthz").status == 200


def test_slow_clients_are_cut_off_and_healthz_keeps_answering(app):
    # The review: POSTs sending a body byte every 5 s and a GET sending a header line every 5 s were
    # all still open after 70 s, each POST holding a request slot. Scaled: 100 bodies and 100 header
    # blocks that stop arriving; /healthz answers meanwhile; every trickled body gets 408
    # body_timeout once serve.body_timeout_s (here 1 s) has passed, every header block 408
    # header_timeout at serve.header_timeout_s (HEADER_TIMEOUT_S on test servers); idle ones close.
    from urllib.parse import urlsplit

    parts = urlsplit(app.url)
    bodies, heads = [], []
    try:
        for _ in range(100):
            conn = socket.create_connection((parts.hostname, parts.port), timeout=30)
            conn.sendall(b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{")
            bodies.append(conn)
            conn = socket.create_connection((parts.hostname, parts.port), timeout=30)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            heads.append(conn)
        # A kept-alive connection: one whole request answered, then the next one's headers trickle.
        kept = socket.create_connection((parts.hostname, parts.port), timeout=30)
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answered = b""
        while b'"ok"' not in answered:
            answered += kept.recv(65536)
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        heads.append(kept)
        idle = socket.create_connection((parts.hostname, parts.port), timeout=30)  # sends nothing at all
        heads.append(idle)
        assert call("GET", f"{app.url}/healthz").status == 200
        for conn in bodies:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            head, _, answer = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), head
            error = json.loads(answer)["error"]
            assert error["code"] == "body_timeout" and "serve.body_timeout_s" in error["message"]
        for conn in heads[:-1]:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            head, _, answer = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408") and json.loads(answer)["error"]["code"] == "header_timeout", data
        assert idle.recv(1) == b""  # closed without a word: it never began a request
        assert call("GET", f"{app.url}/healthz").status == 200
    finally:
        for conn in bodies + heads:
            conn.close()


def test_serve_proxies_get_the_header_limit_through_rays_proxy_callback(monkeypatch):
    # Ray Serve's proxy builds its own uvicorn server ("auto" protocol) and calls the function named
    # by RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH first: `pipedit serve` names install, which points
    # "auto" at the protocol with the limit. Here: what the proxy process does, in this one.
    import importlib

    import uvicorn.config

    from pipedit.serve import header_timeout

    variables = header_timeout.environment(7.5)
    module, _, function = variables[header_timeout.CALLBACK_ENV].partition(":")
    monkeypatch.setitem(uvicorn.config.HTTP_PROTOCOLS, "auto", uvicorn.config.HTTP_PROTOCOLS["auto"])
    monkeypatch.setenv(header_timeout.TIMEOUT_ENV, variables[header_timeout.TIMEOUT_ENV])
    assert getattr(importlib.import_module(module), function)() == []  # no middleware
    config = uvicorn.config.Config(lambda scope, receive, send: None, http="auto")
    config.load()
    assert config.http_protocol_class.__name__ == "HeaderTimeoutProtocol"
    assert config.http_protocol_class.on_headers_complete is not uvicorn.config.import_from_string(
        "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol").on_headers_complete
