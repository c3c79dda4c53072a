"""Deadlines follow the slowest measured step: max(floor, factor x slowest), plus a floor of grace
for the driver, so a rank's own (more precise) operation timeout arrives first."""

import pytest

from pipedit.config import ReliabilityConfig
from pipedit.errors import UserInputError
from pipedit.runtime.deadlines import Deadlines


def test_the_floor_holds_until_steps_are_slow_then_factor_times_the_slowest():
    deadlines = Deadlines(ReliabilityConfig(op_deadline_floor_s=5.0, op_deadline_factor=10.0))
    assert (deadlines.op_s, deadlines.call_s, deadlines.decode_s) == (5.0, 10.0, 10.0)
    assert deadlines.observe_step(0.1)  # the ranks hold no deadline from us yet
    deadlines.sent_op_s = deadlines.op_s
    assert not deadlines.observe_step(0.3) and deadlines.op_s == 5.0
    assert deadlines.observe_step(2.0) and deadlines.op_s == 20.0 and deadlines.call_s == 25.0
    deadlines.sent_op_s = 20.0
    assert not deadlines.observe_step(1.0) and deadlines.op_s == 20.0  # the slowest counts
    deadlines.observe_decode(3.0)
    assert deadlines.decode_s == 35.0


@pytest.mark.parametrize("values, says", [
    ({"retries": -1}, "retries must be an integer >= 0"),
    ({"op_deadline_factor": 0}, "op_deadline_factor must be a positive number"),
    ({"op_deadline_floor_s": 700.0}, "must be below group_timeout_s"),
])
def test_bad_reliability_settings_are_refused(values, says):
    with pytest.raises(UserInputError, match=says):
        ReliabilityConfig(**values)
