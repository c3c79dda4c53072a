"""Create requests the review found accepted although they cannot make a video or are not what they
say, sent into the app in-process (no socket), on a service whose engine runs nothing and whose
model is a stand-in taking an image and a flow_shift:
- an input_reference whose aspect ratio is far from the video's (a 1x16777216 greyscale png,
  exactly serve.max_image_pixels, for a 64x64 video: it failed in the encode, and was retried);
- `true` for a number (`"flow_shift": true`, a LoRA `"scale": true`), which the schema took as 1.0;
- a size in digits other than ASCII's (`"３２x32"`)."""

import io
import json

import pytest

from idle_app import asgi_request
from image_inputs import ImageModel, image_bytes, multipart
from pipedit.capabilities import Capabilities
from pipedit.config import GenerationDefaults
from pipedit.images import MAX_ASPECT_FACTOR
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.jobs.store import JobStore
from serve_helpers import IdleEngine


class ShiftingImageModel(ImageModel):
    def __init__(self):
        super().__init__()
        self.capabilities = Capabilities(image=True, flow_shift=True)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("absurd")
    service = JobService(IdleEngine(), JobStore.in_folder(folder), folder, "demo", GenerationDefaults(64, 64, 5, 2),
                         ServiceLimits(max_queued=1000), validate=ShiftingImageModel().validate)
    try:
        yield build_app(service)
    finally:
        service.close()
        service.store.close()


def _create(app, body: dict):
    status, _, reply = asgi_request(app, "POST", "/v1/videos", {"Content-Type": "application/json"},
                                    json.dumps(body).encode())
    return status, json.loads(reply)


def _upload(app, image: bytes, size: str):
    body, headers = multipart({"prompt": "a fox", "size": size}, {"input_reference": ("ref.png", image, "image/png")})
    status, _, reply = asgi_request(app, "POST", "/v1/videos", headers, body)
    return status, json.loads(reply)


def _grey_png(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (width, height), 128).save(out, format="PNG")
    return out.getvalue()


def test_an_image_whose_aspect_cannot_make_the_video_is_refused_at_create(app):
    assert ServiceLimits().max_image_pixels == 1 * 16777216  # the review's image is exactly at the limit
    status, reply = _upload(app, _grey_png(1, 16777216), "64x64")
    assert status == 400, reply
    error = reply["error"]
    assert (error["code"], error["param"]) == ("image_aspect_mismatch", "input_reference")
    assert "1x16777216" in error["message"] and f"at most {MAX_ASPECT_FACTOR:g} times" in error["message"]
    # Within the factor either way, as the video's own shape: accepted.
    assert _upload(app, image_bytes("png", (40, 400)), "64x64")[0] == 200
    assert _upload(app, image_bytes("png", (400, 40)), "64x64")[0] == 200
    assert _upload(app, image_bytes("png", (16, 400)), "32x800")[0] == 200
    assert _upload(app, image_bytes("png", (400, 16)), "64x64")[1]["error"]["code"] == "image_aspect_mismatch"


@pytest.mark.parametrize("body, param", [
    ({"flow_shift": True}, "flow_shift"), ({"seed": True}, "seed"), ({"guidance_scale": False}, "guidance_scale"),
    ({"num_inference_steps": "2"}, "num_inference_steps"), ({"flow_shift": "5"}, "flow_shift"),
    ({"loras": [{"name": "style", "scale": True}]}, "loras.0.scale")])
def test_a_number_must_be_a_json_number(app, body, param):
    status, reply = _create(app, {"prompt": "a fox", **body})
    assert status == 400, reply
    assert (reply["error"]["param"], reply["error"]["code"]) == (param, "invalid_value")
    assert "must be a number, got" in reply["error"]["message"]


def test_numbers_as_a_form_sends_them_are_still_read(app):
    body, headers = multipart({"prompt": "a fox", "num_inference_steps": "2", "flow_shift": "5", "seed": "7"})
    status, _, reply = asgi_request(app, "POST", "/v1/videos", headers, body)
    video = json.loads(reply)
    assert status == 200 and (video["pipedit"]["flow_shift"], video["pipedit"]["seed"]) == (5.0, 7), video
    assert _create(app, {"prompt": "a fox", "flow_shift": 5, "seed": 7})[0] == 200


@pytest.mark.parametrize("size", ["３２x32", "32x３２", "٣٢x32"])
def test_a_size_in_digits_other_than_ascii_is_refused(app, size):
    status, reply = _create(app, {"prompt": "a fox", "size": size})
    assert status == 400 and reply["error"]["param"] == "size", reply
    assert _create(app, {"prompt": "a fox", "size": "32x32"})[0] == 200
