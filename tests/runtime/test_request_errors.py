"""Request errors the review found treated otherwise, on one in-process rank (the demo checkpoint):
- latents that turn NaN or infinite end the request failed with `non_finite_latents`, instead of
  being decoded into a black video (flow_shift 1e308 or a LoRA scale of 1e30 ran to `completed`
  with every frame 0; the field table refuses those values now, the check after the last step
  catches whatever else overflows);
- an input that cannot be prepared in the encode (a 1x16777216 image: MemoryError with an empty
  message) fails the request at once with the error's type and text; it was retried as if a rank
  had failed.
Neither is retried (retries=2 here), and the next request runs."""

import pytest

from pipedit.config import EngineConfig, ModelConfig, ReliabilityConfig
from pipedit.errors import InvalidRequestError, NonFiniteLatents
from pipedit.integrations.hunyuan_video.adapter import HunyuanVideoAdapter
from pipedit.request import RequestFailure, RequestStatus, VideoRequest
from pipedit.runtime.engine_loop import EngineLoop


@pytest.fixture(scope="module")
def engine(demo_checkpoint):
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)), reliability=ReliabilityConfig(retries=2))
    with EngineLoop.from_config(config) as loop:
        yield loop


def _request(prompt="a fox", **fields):
    return VideoRequest(prompt, height=64, width=64, num_frames=5, steps=2, **fields)


def _fails_once(engine, request) -> RequestFailure:
    """Runs `request` then a plain one: the outcome of the first, which ran once; the second completes."""
    events = []
    remove = engine.add_listener(events.append)
    try:
        plain = _request()
        engine.submit(request)
        engine.submit(plain)
        failed = engine.wait(request.request_id, timeout=120)
        assert not isinstance(engine.wait(plain.request_id, timeout=120), RequestFailure)
    finally:
        remove()
    statuses = [e.status for e in events if e.request_id == request.request_id]
    assert statuses.count(RequestStatus.ENCODING) == 1 and RequestStatus.DONE not in statuses  # never retried
    assert isinstance(failed, RequestFailure)
    return failed


def test_non_finite_latents_fail_the_request_with_their_code(engine):
    absurd = _request(flow_shift=5.0)
    object.__setattr__(absurd, "flow_shift", 1e308)  # the review's value, past the field's check (it refuses it now)
    failed = _fails_once(engine, absurd)
    assert isinstance(failed.error, NonFiniteLatents), failed.message
    assert failed.code == "non_finite_latents" and "NaN or infinity" in failed.message


def test_an_input_that_cannot_be_prepared_fails_at_once_with_its_type(engine, monkeypatch):
    original = HunyuanVideoAdapter.encode_prompt

    def encode(self, prompt, *args, **kwargs):
        if prompt == "too big to prepare":
            raise MemoryError()  # what resizing a 1x16777216 image to cover a video raises: no text
        return original(self, prompt, *args, **kwargs)

    monkeypatch.setattr(HunyuanVideoAdapter, "encode_prompt", encode)
    failed = _fails_once(engine, _request("too big to prepare"))
    assert failed.phase == "encode" and isinstance(failed.error, InvalidRequestError), failed.message
    assert failed.message.endswith("failed while encode: encoding the request's inputs failed: MemoryError: ")
    assert failed.code == "encode_failed"
