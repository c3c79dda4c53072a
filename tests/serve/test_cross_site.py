"""Another web page the user visits must not drive the API from the user's browser: POST and
DELETE from a foreign Origin, or marked Sec-Fetch-Site: cross-site, get 403; bodies that a page
can send without asking (text/plain, urlencoded) get 415; on loopback only loopback Host names
(and serve.allowed_hosts) are answered, against DNS rebinding. Clients that are not browsers
(curl, the OpenAI SDK) send no Origin and keep working, JSON or multipart."""

import pytest

from idle_app import start_idle
from serve_helpers import call


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    running = start_idle(tmp_path_factory.mktemp("cross"), allowed_hosts=("pipedit.lan",))
    yield running
    running.close()


def _error(reply, status, code):
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    return error


def _port(app):
    return app.url.rsplit(":", 1)[1]


def test_a_foreign_origin_cannot_post_or_delete(app):
    # What the review sent: a page elsewhere posting JSON as text/plain (no preflight), and as JSON.
    for headers in ({"Origin": "https://evil.example", "Content-Type": "text/plain"},
                    {"Origin": "https://evil.example", "Content-Type": "application/json"},
                    {"Origin": "null", "Content-Type": "application/json"},
                    {"Origin": f"http://localhost:{int(_port(app)) + 1}", "Content-Type": "application/json"},
                    {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}):
        reply = call("POST", f"{app.url}/v1/videos", data=b'{"prompt": "a fox"}', headers=headers)
        error = _error(reply, 403, "cross_site_request")
        assert "Origin" in error["message"] or "cross-site" in error["message"]
    video_id = call("POST", f"{app.url}/v1/videos", {"prompt": "mine"}).json()["id"]
    _error(call("DELETE", f"{app.url}/v1/videos/{video_id}", headers={"Origin": "https://evil.example"}),
           403, "cross_site_request")
    assert call("GET", f"{app.url}/v1/videos/{video_id}").status == 200  # still there


def test_the_servers_own_page_and_non_browser_clients_pass(app):
    own = {"Origin": app.url, "Sec-Fetch-Site": "same-origin"}
    assert call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers=own).status == 200
    local = {"Origin": f"http://localhost:{_port(app)}", "Host": f"localhost:{_port(app)}"}
    video_id = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers=local).json()["id"]
    assert call("DELETE", f"{app.url}/v1/videos/{video_id}", headers=own).status == 200
    # A cross-site GET is harmless (no state changes): reading needs the key when there is one.
    assert call("GET", f"{app.url}/v1/videos", headers={"Origin": "https://evil.example"}).status == 200


def test_bodies_a_page_can_send_unasked_are_415(app):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        error = _error(call("POST", f"{app.url}/v1/videos", data=b'{"prompt": "a fox"}', headers=headers),
                       415, "unsupported_media_type")
        assert "application/json" in error["message"]
    assert call("POST", f"{app.url}/v1/videos", data=b'{"prompt": "a fox"}',
                headers={"Content-Type": "application/json; charset=utf-8"}).status == 200
    boundary = "b0undary"
    form = f"--{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\na fox\r\n--{boundary}--\r\n"
    assert call("POST", f"{app.url}/v1/videos", data=form.encode(),
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}).status == 200


def test_on_loopback_only_loopback_host_names_and_allowed_hosts_are_answered(app):
    port = _port(app)
    for host in ("evil.example", f"evil.example:{port}", f"attacker.rebind.network:{port}", "10.0.0.1"):
        error = _error(call("GET", f"{app.url}/v1/videos", headers={"Host": host}), 400, "host_not_allowed")
        assert "serve.allowed_hosts" in error["message"]
    _error(call("GET", f"{app.url}/", headers={"Host": "evil.example"}), 400, "host_not_allowed")
    # What the review sent: names that begin like loopback's and are not.
    for host in ("[::1].evil.example", "localhost:80@evil.example", f"localhost:{port}@evil.example",
                 f"[::1]:{port}.evil.example", "localhost:80:81", "[::1]x"):
        error = _error(call("GET", f"{app.url}/v1/videos", headers={"Host": host}), 400, "host_not_allowed")
        assert "Host" in error["message"], host
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost", f"pipedit.lan:{port}",
                 "PipEdit.LAN"):
        assert call("GET", f"{app.url}/v1/videos", headers={"Host": host}).status == 200, host


def test_bound_to_all_interfaces_any_host_is_answered(tmp_path):
    running = start_idle(tmp_path, host="0.0.0.0")
    try:
        assert call("GET", f"{running.url}/v1/videos", headers={"Host": "gpu-box.example:8000"}).status == 200
        # What no server name looks like is refused whatever the bind.
        _error(call("GET", f"{running.url}/v1/videos", headers={"Host": "gpu-box.example:8000@evil.example"}),
               400, "host_not_allowed")
        # The Origin check still holds, against the Host the request names.
        assert call("POST", f"{running.url}/v1/videos", {"prompt": "a fox"},
                    headers={"Host": "gpu-box.example:8000", "Origin": "http://gpu-box.example:8000"}).status == 200
        _error(call("POST", f"{running.url}/v1/videos", {"prompt": "a fox"},
                    headers={"Host": "gpu-box.example:8000", "Origin": "http://other.example"}),
               403, "cross_site_request")
    finally:
        running.close()


def test_page_and_api_answers_forbid_framing_and_sniffing(app):
    # The review: no Content-Security-Policy, frame-ancestors or X-Frame-Options, X-Content-Type-Options.
    answers = {"page": call("GET", f"{app.url}/"), "api": call("GET", f"{app.url}/v1/videos"),
               "static": call("GET", f"{app.url}/static/app.js"),
               "unknown route": call("GET", f"{app.url}/nowhere"),
               "refusal": call("GET", f"{app.url}/v1/videos", headers={"Host": "evil.example"})}
    for what, reply in answers.items():
        headers = {k.lower(): v for k, v in reply.headers.items()}
        policy = headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in policy and "default-src 'self'" in policy, what
        assert "script-src 'self';" in policy and "https:" not in policy, what
        assert headers.get("x-frame-options") == "DENY" and headers.get("x-content-type-options") == "nosniff", what


def test_docs_are_off_by_default_and_pinned_when_on(app):
    from pipedit.serve.http.app import build_app
    from pipedit.serve.http.headers import SWAGGER_UI
    from idle_app import asgi_request

    # Swagger UI loads its script from a CDN on the origin where the page keeps the API key: off.
    off = call("GET", f"{app.url}/docs")
    _error(off, 404, "not_found")
    assert "cdn" not in {k.lower(): v for k, v in off.headers.items()}["content-security-policy"]
    _error(call("GET", f"{app.url}/redoc"), 404, "not_found")
    assert call("GET", f"{app.url}/openapi.json").json()["info"]["title"] == "pipedit"
    status, headers, body = asgi_request(build_app(app.service, docs=True), "GET", "/docs")
    assert status == 200 and f"{SWAGGER_UI}/swagger-ui-bundle.js".encode() in body
    assert "@5.17.14" in SWAGGER_UI  # one pinned version, not a moving major
    assert f"script-src 'self' 'unsafe-inline' {SWAGGER_UI}/;" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
