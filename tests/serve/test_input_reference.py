"""input_reference (image-to-video) over HTTP, on a service whose engine runs nothing and whose
model is a stand-in declaring what it takes: each bad image gets its 400 (or 413) naming the fix,
an image on a text-only model is refused naming the models that take one, data URLs work as
multipart files do, the image is stored with its job (also for a restart) and deleted with it."""

import json
import time

import pytest

from image_inputs import ImageModel, data_url, image_bytes, multipart, png_header_only
from idle_app import raw_request
from pipedit.fields import IMAGE_MODELS
from pipedit.config import GenerationDefaults
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobRecord, JobStore
from serve_helpers import IdleEngine, Running, call, serve_in_thread, wait_for

UPLOAD_CAP = 64 << 10
LIMITS = ServiceLimits(max_queued=1000, max_image_pixels=96 * 96, max_upload_bytes=UPLOAD_CAP)
PNG = image_bytes("png", (40, 24))


class RecordingEngine(IdleEngine):
    """IdleEngine that keeps the requests it was given."""

    def __init__(self):
        super().__init__()
        self.requests = []

    def submit(self, request):
        self.requests.append(request)
        return super().submit(request)


def _start(folder, model: ImageModel | None, engine=None) -> Running:
    engine = engine or IdleEngine()
    service = JobService(engine, JobStore.in_folder(folder), folder, "demo", GenerationDefaults(64, 64, 5, 2),
                         LIMITS, validate=model.validate if model else None)
    url, stop = serve_in_thread(build_app(service))
    return Running(engine, service, url, stop)


@pytest.fixture(scope="module")
def i2v(tmp_path_factory):
    running = _start(tmp_path_factory.mktemp("i2v"), ImageModel())
    yield running
    running.close()


def _upload(url, data, fields=None, filename="ref.png", kind="image/png"):
    body, headers = multipart(dict({"prompt": "a fox"}, **(fields or {})), {"input_reference": (filename, data, kind)})
    return call("POST", f"{url}/v1/videos", data=body, headers=headers)


def _error(reply, status, code, param="input_reference"):
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert (error["code"], error["param"]) == (code, param), error
    return error["message"]


@pytest.mark.parametrize("name, data, words", [
    ("not an image", b"%PDF-1.4 hello", ["not an image", "png, jpeg or webp"]),
    ("gif", image_bytes("gif"), ["GIF", "png, jpeg or webp"]),
    ("damaged", PNG[: len(PNG) // 2], ["damaged or truncated"]),
    ("empty", b"", ["empty"]),
])
def test_a_bad_image_is_400_invalid_image(i2v, name, data, words):
    before = i2v.service.store.count("queued")
    message = _error(_upload(i2v.url, data), 400, "invalid_image")
    assert all(word in message for word in words), message
    assert i2v.service.store.count("queued") == before


def test_too_many_pixels_is_400_naming_the_limit_before_any_pixel_is_decoded(i2v):
    message = _error(_upload(i2v.url, image_bytes("png", (97, 96))), 400, "image_too_large")
    assert "97x96 = 9,312 pixels" in message and "9,216" in message and "serve.max_image_pixels" in message
    # 100000 x 100000 announced in 60 bytes: decoding it would take 30 GB; the header alone refuses it.
    bomb = png_header_only(100_000, 100_000)
    assert len(bomb) < 100
    assert "serve.max_image_pixels" in _error(_upload(i2v.url, bomb), 400, "image_too_large")
    assert _upload(i2v.url, image_bytes("png", (96, 96))).status == 200  # at the limit


def _post_raw(url, body, headers):
    """POST with a client that reads the answer even when the server answers before the body is sent whole."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    status, reply = raw_request(url, f"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
                                     f"Content-Length: {len(body)}", [body])
    return status, json.loads(reply)["error"]


def test_an_upload_over_max_upload_bytes_is_413(i2v):
    padded = PNG + b"\0" * UPLOAD_CAP
    body, headers = multipart({"prompt": "a fox"}, {"input_reference": ("r.png", padded, "image/png")})
    status, error = _post_raw(i2v.url, body, headers)
    assert (status, error["code"]) == (413, "body_too_large"), error
    assert f"at most {UPLOAD_CAP:,} bytes (serve.max_upload_bytes)" in error["message"]
    under, headers = multipart({"prompt": "a fox"}, {"input_reference": ("r.png", PNG, "image/png")})
    assert _post_raw(i2v.url, under + b"\0" * (UPLOAD_CAP - len(under)), headers)[0] == 200  # at the cap
    # JSON bodies keep serve.max_body_bytes (1 MiB), and the 413 says how larger images may come.
    status, error = _post_raw(i2v.url, json.dumps({"prompt": "a fox", "input_reference": "x" * (1 << 20)}).encode(),
                              {"Content-Type": "application/json"})
    assert status == 413 and "(serve.max_body_bytes)" in error["message"], error
    assert "multipart/form-data file part" in error["message"] and "serve.max_upload_bytes" in error["message"]


@pytest.mark.parametrize("fmt", ["png", "jpeg", "webp"])
def test_each_format_is_stored_with_its_job_and_deleted_with_it(i2v, fmt):
    data = image_bytes(fmt, (40, 24))
    reply = _upload(i2v.url, data, {"size": "64x64", "num_frames": "5"}, f"ref.{fmt}", f"image/{fmt}")
    assert reply.status == 200, reply.body
    video = reply.json()
    assert video["pipedit"]["input_reference"] == {"format": fmt, "width": 40, "height": 24, "bytes": len(data)}
    assert i2v.service.store.image(video["id"]) == data
    assert call("GET", f"{i2v.url}/v1/videos/{video['id']}").json()["pipedit"]["input_reference"]["format"] == fmt
    assert call("DELETE", f"{i2v.url}/v1/videos/{video['id']}").status == 200
    assert i2v.service.store.image(video["id"]) is None


@pytest.mark.parametrize("form", ["json string", "json object", "multipart field", "multipart object field"])
def test_a_data_url_works_as_a_file_does(i2v, form):
    url = data_url(PNG)
    if form.startswith("json"):
        value = url if form == "json string" else {"image_url": url}
        reply = call("POST", f"{i2v.url}/v1/videos", {"prompt": "a fox", "input_reference": value})
    else:  # the openai 3.x SDK writes input_reference={"image_url": ...} as the field input_reference[image_url]
        name = "input_reference" if form == "multipart field" else "input_reference[image_url]"
        body, headers = multipart({"prompt": "a fox", name: url})
        reply = call("POST", f"{i2v.url}/v1/videos", data=body, headers=headers)
    assert reply.status == 200, reply.body
    assert i2v.service.store.image(reply.json()["id"]) == PNG


def test_an_explicit_null_is_no_image(i2v):
    reply = call("POST", f"{i2v.url}/v1/videos", {"prompt": "a fox", "input_reference": None})
    assert reply.status == 200 and reply.json()["pipedit"]["input_reference"] is None
    assert i2v.service.store.image(reply.json()["id"]) is None


@pytest.mark.parametrize("value, code, words", [
    ("https://example.com/fox.png", "unsupported_parameter", "not fetched"),
    ({"file_id": "file_123"}, "unsupported_parameter", "no Files API"),
    ("data:image/png;base64,@@@", "invalid_value", "cannot be decoded"),
    ("data:image/png,rawbytes", "invalid_value", "base64"),
    ("fox.png", "invalid_value", "not a data URL"),
    (42, "invalid_value", "JSON int"),
    ({"image_url": "data:image/png;base64,AAAA", "detail": "high"}, "invalid_value", "detail"),
])
def test_what_is_not_an_image_is_refused_saying_what_to_send(i2v, value, code, words):
    message = _error(call("POST", f"{i2v.url}/v1/videos", {"prompt": "a fox", "input_reference": value}), 400, code)
    assert words in message, message


def test_several_images_or_other_files_are_refused(i2v):
    body, headers = multipart({"prompt": "a fox", "input_reference[image_url]": data_url(PNG)},
                              {"input_reference": ("ref.png", PNG, "image/png")})
    _error(call("POST", f"{i2v.url}/v1/videos", data=body, headers=headers), 400, "invalid_value")
    body, headers = multipart({"prompt": "a fox"}, {"mask": ("mask.png", PNG, "image/png")})
    _error(call("POST", f"{i2v.url}/v1/videos", data=body, headers=headers), 400, "unsupported_parameter", "mask")


def test_negative_prompt_goes_with_the_job_for_a_model_with_guidance(i2v):
    body, headers = multipart({"prompt": "a fox", "negative_prompt": "blurry"},
                              {"input_reference": ("r.png", PNG, "image/png")})
    video = call("POST", f"{i2v.url}/v1/videos", data=body, headers=headers).json()
    assert video["pipedit"]["negative_prompt"] == "blurry"
    assert i2v.service.store.get(video["id"]).params["negative_prompt"] == "blurry"
    message = _error(call("POST", f"{i2v.url}/v1/videos", {"prompt": "a fox", "negative_prompt": "x" * 4001}), 400,
                     "prompt_too_long", "negative_prompt")
    assert "4001" in message


def test_guidance_scale_2_is_refused_by_a_model_with_one_transformer(i2v):
    message = _error(call("POST", f"{i2v.url}/v1/videos", {"prompt": "a fox", "guidance_scale_2": 3.0}), 400,
                     "unsupported_parameter", "guidance_scale_2")
    assert "two-expert" in message
    _error(call("POST", f"{i2v.url}/v1/videos", {"prompt": "a fox", "guidance_scale_2": 31}), 400,
           "invalid_value", "guidance_scale_2")


def test_options_say_what_the_model_takes(i2v):
    options = call("GET", f"{i2v.url}/v1/pipedit/options").json()
    assert (options["takes_image"], options["needs_image"], options["takes_negative_prompt"]) == (True, False, True)
    assert options["takes_guidance_scale_2"] is False
    assert options["image_formats"] == ["png", "jpeg", "webp"]
    assert options["max_image_pixels"] == 96 * 96 and options["max_upload_bytes"] == UPLOAD_CAP


def test_a_text_only_model_refuses_an_image_naming_the_models_that_take_one(tmp_path):
    running = _start(tmp_path, ImageModel(takes_image=False, takes_negative_prompt=False))
    try:
        message = _error(_upload(running.url, PNG), 400, "unsupported_parameter")
        assert IMAGE_MODELS in message
        reply = call("POST", f"{running.url}/v1/videos", {"prompt": "a fox", "input_reference": data_url(PNG)})
        assert IMAGE_MODELS in _error(reply, 400, "unsupported_parameter")
        message = _error(call("POST", f"{running.url}/v1/videos", {"prompt": "a fox", "negative_prompt": "blur"}),
                         400, "unsupported_parameter", "negative_prompt")
        assert "wan, opensora-plan" in message
        assert running.service.store.count("queued") == 0
        options = call("GET", f"{running.url}/v1/pipedit/options").json()
        assert (options["takes_image"], options["takes_negative_prompt"]) == (False, False)
    finally:
        running.close()


def test_an_image_to_video_model_refuses_a_request_without_an_image(tmp_path):
    running = _start(tmp_path, ImageModel(needs_image=True))
    try:
        message = _error(call("POST", f"{running.url}/v1/videos", {"prompt": "a fox"}), 400,
                         "missing_required_parameter")
        assert "image-to-video" in message and "input_reference" in message
        assert _upload(running.url, PNG).status == 200
    finally:
        running.close()


def test_a_restart_runs_the_job_again_with_its_image(tmp_path):
    model = ImageModel(takes_guidance_scale_2=True)
    first = _start(tmp_path, model, RecordingEngine())
    body, headers = multipart({"prompt": "a fox", "negative_prompt": "rain", "guidance_scale_2": "3.5"},
                              {"input_reference": ("r.webp", PNG, "image/webp")})
    video_id = call("POST", f"{first.url}/v1/videos", data=body, headers=headers).json()["id"]
    wait_for(lambda: first.engine.requests, timeout=10)
    first.stop()
    first.service.close()  # hands the job back to the queue, as a lapsed lease would after a crash
    first.service.store.close()
    engine = RecordingEngine()
    again = _start(tmp_path, model, engine)
    try:
        wait_for(lambda: engine.requests, timeout=10)
        for request in (first.engine.requests[0], engine.requests[0]):
            assert (request.request_id, request.image, request.negative_prompt) == (video_id, PNG, "rain")
            assert request.guidance_scale_2 == 3.5
        assert again.service.store.get(video_id).attempt == 2
    finally:
        again.close()


def test_a_job_whose_image_is_lost_fails_instead_of_running_without_it(tmp_path):
    store = JobStore.in_folder(tmp_path)
    params = {"prompt": "a fox", "width": 64, "height": 64, "num_frames": 5, "fps": 24, "num_inference_steps": 2,
              "guidance_scale": 6.0, "seed": 1, "seconds": "0.208",
              "image": {"format": "png", "width": 40, "height": 24, "bytes": len(PNG)}}
    store.add(JobRecord(id="video_lost", status="queued", created_at=time.time(), params=params,
                        extras={"stage": "queued"}))  # a row whose image never made it (no image given)
    store.close()
    running = _start(tmp_path, ImageModel(), RecordingEngine())
    try:
        wait_for(lambda: running.service.store.get("video_lost").status == "failed", timeout=10)
        error = running.service.store.get("video_lost").error
        assert error["code"] == "invalid_request" and "input_reference image is missing" in error["message"]
        assert running.engine.requests == []
    finally:
        running.close()


def test_a_full_queue_is_answered_before_the_upload_is_read_or_decoded(tmp_path, monkeypatch):
    # The review: with a key's queue full, a 4096x4096 16-bit PNG was decoded (1.31 s, +300 MB for
    # three) before the 429. Scaled down: the image must not be decoded at all, nor the body parsed.
    from pipedit.serve.contract import params
    from pipedit.serve.http import app as api
    from idle_app import asgi_request

    decoded, parsed = [], []
    monkeypatch.setattr(params, "check_image", lambda data, *limits: decoded.append(len(data)))
    original_form = api._form
    monkeypatch.setattr(api, "_form", lambda *args: (parsed.append(1), original_form(*args))[1])
    service = JobService(IdleEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo", GenerationDefaults(64, 64, 5, 2),
                         ServiceLimits(max_queued=10, max_queued_per_key=1), validate=ImageModel().validate)
    try:
        app = build_app(service, api_keys=("k1",))
        body, headers = multipart({"prompt": "a fox"}, {"input_reference": ("big.png", image_bytes("png", (512, 512)),
                                                                           "image/png")})
        headers["Authorization"] = "Bearer k1"
        assert asgi_request(app, "POST", "/v1/videos", headers, body)[0] == 200
        assert (decoded, parsed) == ([len(image_bytes("png", (512, 512)))], [1])
        status, answer_headers, answer = asgi_request(app, "POST", "/v1/videos", headers, body)
        assert status == 429 and json.loads(answer)["error"]["code"] == "queue_full"
        assert int(answer_headers["retry-after"]) >= 1
        assert len(decoded) == 1 and len(parsed) == 1  # the refused upload was neither parsed nor decoded
    finally:
        service.close()
        service.store.close()
