"""Deadlines follow the slowest measured step: max(floor, factor x slowest), plus a floor of grace
for the driver, so a rank's own (more precise) operation timeout arrives first."""

import pytest

from pipedit.config import ReliabilityConfig
from pipedit.errors import UserInputError
from pipedit.runtime.deadlines import Deadlines


def test_the_floor_holds_until_steps_are_slow_then_factor_times_the_slowest():
    deadlines = Deadlines(ReliabilityConfig(op_deadline_floor_s=5.0, op_deadline_factor=10.0))
    assert (deadlines.op_s, deadlines.call_s, deadlines.decode_s()) == (5.0, 10.0, 10.0)
    assert deadlines.observe_step(0.1)  # the ranks hold no deadline from us yet
    deadlines.sent_op_s = deadlines.op_s
    assert not deadlines.observe_step(0.3) and deadlines.op_s == 5.0
    assert deadlines.observe_step(2.0) and deadlines.op_s == 20.0 and deadlines.call_s == 25.0
    deadlines.sent_op_s = 20.0
    assert not deadlines.observe_step(1.0) and deadlines.op_s == 20.0  # the slowest counts
    deadlines.observe_decode(3.0)
    assert deadlines.decode_s() == 35.0


def test_the_operation_deadline_stays_below_the_group_timeout():
    """A 720p step on 6 A6000s (planner: 31-38 s) x 10 would pass NCCL's 300 s watchdog: the hang
    would surface as a dead rank instead of an OperationTimeout naming the operation."""
    deadlines = Deadlines(ReliabilityConfig(group_timeout_s=300.0))
    deadlines.observe_step(38.0)
    assert deadlines.op_s == 0.8 * 300.0 < 10 * 38.0


def test_a_first_720p_decode_on_a_slow_gpu_is_bounded_by_the_planners_prediction():
    """Before any decode is measured the bound was the floor's 120 s; the planner predicts
    138-161 s for a tiled 720x1280x129 HunyuanVideo decode on L40 / A6000."""
    from pipedit.adapter import VideoShape
    from pipedit.planner.models import full_size
    from pipedit.runtime.decode_prediction import decode_predictor

    shape = VideoShape(720, 1280, 129)
    for gpu in ("NVIDIA L40", "NVIDIA RTX A6000", "NVIDIA A100-SXM4-80GB"):  # the A100 has no profile
        predict = decode_predictor(full_size("hunyuan-video"), gpu)
        deadlines = Deadlines(ReliabilityConfig(), predict)
        assert predict(shape) > 2 * ReliabilityConfig().op_deadline_floor_s
        assert deadlines.decode_s(shape) >= predict(shape) + ReliabilityConfig().op_deadline_floor_s
        assert deadlines.decode_s(VideoShape(64, 64, 5)) == deadlines.decode_s()  # small: the floor
    assert decode_predictor(full_size("hunyuan-video"), None) is None  # CPU ranks: the floor


@pytest.mark.parametrize("values, says", [
    ({"retries": -1}, "retries must be an integer >= 0"),
    ({"op_deadline_factor": 0}, "op_deadline_factor must be a positive number"),
    ({"op_deadline_floor_s": 700.0}, "must be at most 0.8 x group_timeout_s"),
    ({"op_deadline_floor_s": 250.0, "group_timeout_s": 300.0}, "before the process group's own timeout"),
])
def test_bad_reliability_settings_are_refused(values, says):
    with pytest.raises(UserInputError, match=says):
        ReliabilityConfig(**values)


def test_an_encode_with_an_image_waits_as_long_as_a_decode_of_the_video():
    """Image-to-video: the text rank's VAE encodes a video of the request's shape (Wan2.1 I2V: the
    image, then zero frames), beside a running decode; step-sized bounds would call it hung."""
    from pipedit.adapter import VideoShape
    from pipedit.request import VideoRequest
    from pipedit.runtime.layout import WorldLayout
    from pipedit.runtime.request_pipeline import RequestPipeline

    shape = VideoShape(720, 1280, 81)
    deadlines = Deadlines(ReliabilityConfig(op_deadline_floor_s=5.0), lambda s: 200.0 if s == shape else 1.0)
    assert deadlines.encode_s(shape, with_image=False) == deadlines.call_s == 10.0
    assert deadlines.encode_s(shape, with_image=True) == deadlines.decode_s(shape) == 3 * 200.0 + 5.0

    class EncodeOnly:
        """Records the encode's bound, then fails it as a bad request would (the group stays)."""

        def __init__(self):
            self.timeouts = []

        def call_rank(self, rank, method, *args, timeout=None):
            self.timeouts.append((method, timeout))
            raise ValueError("stop after the encode")

    executor = EncodeOnly()
    pipeline = RequestPipeline(executor, WorldLayout(decode=1), reliability=ReliabilityConfig(op_deadline_floor_s=5.0),
                               predict_decode=lambda s: 200.0)
    with_image = VideoRequest("a fox", height=720, width=1280, num_frames=81, image=b"png bytes")
    list(pipeline.run([VideoRequest("a fox", height=720, width=1280, num_frames=81), with_image]))
    assert executor.timeouts == [("encode_prompt", 10.0), ("encode_prompt", 605.0)]
