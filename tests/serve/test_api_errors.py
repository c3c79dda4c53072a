"""Bad input gets its status and OpenAI's error body; never FastAPI's {"detail"}."""

import pytest

from serve_helpers import SMALL, call, start, wait_status
from pipedit.serve.contract.params import ServiceLimits


def _error(reply, status, param=None, code=None):
    assert reply.status == status, reply.body
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


@pytest.mark.parametrize("fields, param, code", [
    ({"size": "64x60"}, "size", "unsupported_shape"),
    ({"size": "sixty-four"}, "size", "invalid_value"),
    ({"num_frames": 6}, "num_frames", "unsupported_shape"),
    ({"num_inference_steps": 0}, "num_inference_steps", "invalid_value"),
    ({"num_inference_steps": 101}, "num_inference_steps", "invalid_value"),
    ({"guidance_scale": -1}, "guidance_scale", "invalid_value"),
    ({"prompt": "   "}, "prompt", "empty_prompt"),
    ({"model": "sora-2"}, "model", "model_not_found"),
    ({"seconds": "soon"}, "seconds", "invalid_value"),
    ({"num_frames": "many"}, "num_frames", None),
    ({"colour": "red"}, "colour", "extra_forbidden"),
])
def test_bad_create_parameters_are_400_with_the_parameter_named(server, fields, param, code):
    reply = call("POST", f"{server.url}/v1/videos", {"prompt": "a fox", **SMALL, **fields})
    _error(reply, 400, param, code)


def test_missing_prompt_and_bad_bodies(server):
    _error(call("POST", f"{server.url}/v1/videos", {"size": "64x64"}), 400, "prompt")
    _error(call("POST", f"{server.url}/v1/videos", data=b"not json", headers={"Content-Type": "application/json"}),
           400, code="invalid_body")
    _error(call("POST", f"{server.url}/v1/videos", [1, 2]), 400, code="invalid_body")


def test_unknown_ids_routes_and_bad_queries(server):
    for method, path in (("GET", "/v1/videos/video_nope"), ("GET", "/v1/videos/video_nope/content"),
                         ("DELETE", "/v1/videos/video_nope"), ("GET", "/v1/videos/video_nope/events")):
        _error(call(method, server.url + path), 404, "video_id", "video_not_found")
    _error(call("GET", f"{server.url}/v2/nothing"), 404, code="not_found")
    _error(call("PUT", f"{server.url}/v1/videos"), 405, code="method_not_allowed")
    _error(call("GET", f"{server.url}/v1/videos?limit=abc"), 400, "limit")
    _error(call("GET", f"{server.url}/v1/videos?limit=0"), 400, "limit")
    _error(call("GET", f"{server.url}/v1/videos?order=up"), 400, "order")
    _error(call("GET", f"{server.url}/v1/videos?after=video_nope"), 400, "after")


def test_form_fields_are_coerced_and_content_waits_for_completion(server):
    boundary = "pipeditboundary"
    fields = {"prompt": "a boat", "size": "64x48", "num_frames": "9", "num_inference_steps": "2", "seed": "7"}
    data = "".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                   for k, v in fields.items()) + f"--{boundary}--\r\n"
    reply = call("POST", f"{server.url}/v1/videos", data=data.encode(),
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert reply.status == 200, reply.body
    video = reply.json()
    assert (video["size"], video["pipedit"]["num_frames"], video["pipedit"]["seed"]) == ("64x48", 9, 7)
    assert video["id"].startswith("video_") and video["object"] == "video" and video["status"] == "queued"
    early = call("GET", f"{server.url}/v1/videos/{video['id']}/content")
    if early.status != 200:  # the demo model may already be done; if not, the reply says why
        _error(early, 404, code="video_not_ready")
    done = wait_status(server.url, video["id"])
    assert done["progress"] == 100 and done["completed_at"] >= done["created_at"]
    content = call("GET", f"{server.url}/v1/videos/{video['id']}/content")
    assert content.status == 200 and content.headers["content-type"] == "video/mp4" and content.body[4:8] == b"ftyp"


def test_openapi_and_health(server):
    spec = call("GET", f"{server.url}/openapi.json").json()
    assert {"/v1/videos", "/v1/videos/{video_id}", "/v1/videos/{video_id}/content", "/healthz"} <= set(spec["paths"])
    assert "multipart/form-data" in spec["paths"]["/v1/videos"]["post"]["requestBody"]["content"]
    assert call("GET", f"{server.url}/healthz").json() == {"status": "ok"}


def test_queue_full_is_429_with_retry_after(demo_checkpoint, tmp_path):
    running = start(demo_checkpoint, tmp_path, ServiceLimits(max_queued=1))
    try:
        long = call("POST", f"{running.url}/v1/videos", {"prompt": "long", **SMALL, "num_inference_steps": 60}).json()
        wait_status(running.url, long["id"], ("in_progress",))
        assert call("POST", f"{running.url}/v1/videos", {"prompt": "waits", **SMALL}).status == 200
        full = call("POST", f"{running.url}/v1/videos", {"prompt": "one too many", **SMALL})
        error = _error(full, 429, code="queue_full")
        assert int(full.headers["retry-after"]) >= 1 and "retry" in error["message"]
        call("DELETE", f"{running.url}/v1/videos/{long['id']}")
    finally:
        running.close()


def test_api_keys(demo_checkpoint, tmp_path):
    running = start(demo_checkpoint, tmp_path, api_keys=("secret-1", "secret-2"))
    try:
        _error(call("GET", f"{running.url}/v1/videos"), 401, code="invalid_api_key")
        _error(call("GET", f"{running.url}/v1/videos", headers={"Authorization": "Bearer wrong"}), 401,
               code="invalid_api_key")
        assert call("GET", f"{running.url}/v1/videos", headers={"Authorization": "Bearer secret-2"}).status == 200
        assert call("GET", f"{running.url}/healthz").status == 200
    finally:
        running.close()


def test_file_uploads_are_refused_not_dropped(server):
    boundary = "b0undary"
    data = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\na fox\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"input_reference\"; filename=\"ref.png\"\r\n"
            f"Content-Type: image/png\r\n\r\n\x89PNG\r\n--{boundary}--\r\n").encode()
    reply = call("POST", f"{server.url}/v1/videos", data=data,
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    _error(reply, 400, "input_reference", "unsupported_parameter")


def test_health_and_create_when_the_engine_is_gone(demo_checkpoint, tmp_path):
    running = start(demo_checkpoint, tmp_path)
    try:
        running.engine.close()
        _error(call("GET", f"{running.url}/healthz"), 503, code="engine_unavailable")
        _error(call("POST", f"{running.url}/v1/videos", {"prompt": "too late", **SMALL}), 503, code="engine_unavailable")
        assert call("GET", f"{running.url}/v1/videos").json()["data"] == []
    finally:
        running.stop()
        running.service.close()
