"""The HTTP API under random input (hypothesis): bodies built from the create schema's fields with
values of any JSON type, raw bodies under any content type, odd ids and query strings. No answer
may be a 5xx, every error must be OpenAI's error body, and the server must keep answering."""

import json
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipedit.config import GenerationDefaults
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import JobStore
from serve_helpers import IdleEngine, call, serve_in_thread

FIELDS = list(VideoCreateParams.model_fields)
EXAMPLES = 120  # per test; the four tests together run in well under a minute
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["64x64", "0x0", "99999x1", "64X64 ", "1.5", "inf", "nan", "-1", "4e400", "1e308"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                      max_leaves=5)
bodies = st.dictionaries(st.sampled_from(FIELDS + ["extra", "input_reference"]), values, max_size=8)
# A valid prompt and one or two odd fields, so that the checks behind the schema see odd values.
odd_fields = st.dictionaries(st.sampled_from([name for name in FIELDS if name != "prompt"]), scalars,
                             min_size=1, max_size=2).map(lambda fields: {"prompt": "a fox", **fields})
ids = st.text(min_size=1, max_size=40).filter(lambda s: s not in (".", ".."))


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    service = JobService(IdleEngine(), JobStore.in_folder(folder), folder, "demo",
                         GenerationDefaults(64, 64, 5, 2), ServiceLimits(max_queued=10_000))
    url, stop = serve_in_thread(build_app(service))
    yield url
    stop()
    service.close()
    service.store.close()


def _check(reply):
    assert reply.status < 500, (reply.status, reply.body[:500])
    if reply.status >= 400:
        error = json.loads(reply.body)["error"]
        assert error["message"] and error["type"]


@_SETTINGS
@given(body=bodies)
def test_create_with_random_fields(api, body):
    # json.dumps writes NaN and Infinity, which Python's JSON reader (the server's) accepts.
    _check(call("POST", f"{api}/v1/videos", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"}))


@settings(_SETTINGS, max_examples=3 * EXAMPLES)
@given(body=odd_fields)
def test_create_with_a_valid_prompt_and_odd_fields(api, body):
    _check(call("POST", f"{api}/v1/videos", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"}))


@_SETTINGS
@given(raw=st.binary(max_size=200), content_type=st.sampled_from([
    "application/json", "multipart/form-data", "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded", "text/plain", ""]), form=st.dictionaries(
        st.sampled_from(FIELDS + ["zzz"]), st.text(max_size=20), max_size=6))
def test_create_with_raw_and_form_bodies(api, raw, content_type, form):
    headers = {"Content-Type": content_type} if content_type else {}
    _check(call("POST", f"{api}/v1/videos", data=raw, headers=headers))
    _check(call("POST", f"{api}/v1/videos", data=urllib.parse.urlencode(form).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"}))


@_SETTINGS
@given(video_id=ids, method=st.sampled_from(["GET", "DELETE"]), suffix=st.sampled_from(["", "/content", "/events"]))
def test_ids_of_any_text(api, video_id, method, suffix):
    path = f"/v1/videos/{urllib.parse.quote(video_id, safe='')}{suffix}"
    if suffix == "/events" and method == "DELETE":
        method = "GET"
    _check(call(method, f"{api}{path}"))


@_SETTINGS
@given(query=st.dictionaries(st.sampled_from(["limit", "order", "after", "x"]),
                             st.one_of(st.text(max_size=12), st.integers(-10**20, 10**20).map(str)), max_size=4))
def test_list_with_any_query(api, query):
    _check(call("GET", f"{api}/v1/videos?{urllib.parse.urlencode(query)}"))
    assert call("GET", f"{api}/healthz").status == 200  # still answering
