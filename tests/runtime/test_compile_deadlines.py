"""model.compile and the deadlines (what a CPU can show: the bounds each call is given; compile
times themselves are a GPU's). A new rank group warms the configured shape up under
rebuild_timeout_s; the first forward of a video shape the group has not run gets every bound
widened by first_compile_s (the ranks' operation deadline, capped below the group timeout, and
the driver's call bound), and its time is not taken for a step's."""

from dataclasses import replace

from pipedit.config import OP_SHARE_OF_GROUP_TIMEOUT, ReliabilityConfig
from pipedit.request import VideoRequest
from pipedit.runtime.compile import WARM_UP_PROMPTS, graph_key
from pipedit.runtime.layout import WorldLayout
from pipedit.runtime.request_pipeline import RequestPipeline
from recording_executor import RecordingExecutor

RELIABILITY = ReliabilityConfig(op_deadline_floor_s=5.0, group_timeout_s=300.0, rebuild_timeout_s=600.0,
                                first_compile_s=100.0)
STEP_OP_S, STEP_CALL_S = 5.0, 10.0  # the floor, and the floor's grace on top
COMPILE_OP_S, COMPILE_CALL_S = 105.0, 210.0  # + first_compile_s (op: below 0.8 x group timeout)



def _pipeline(executor):
    return RequestPipeline(executor, WorldLayout(decode=0), aco="off", reliability=RELIABILITY, compiled=True)


def _request(height):
    return VideoRequest("a fox", height=height, width=64, num_frames=5, steps=2)


def test_the_warm_up_compiles_the_configured_shape_under_the_rebuild_timeout():
    executor = RecordingExecutor()
    pipeline = _pipeline(executor)
    pipeline.warm_up(_request(64))
    forward = [("encode_prompt", 600.0), ("begin", 600.0), ("time_forward", 600.0), ("drop_job", 600.0)]
    assert [(method, timeout) for method, _, timeout in executor.calls] == [
        ("set_op_deadline", 600.0), *forward, *forward, ("set_op_deadline", 600.0)]
    # Two prompt lengths: the second makes the text dimension dynamic (runtime/compile.py).
    assert [args[0].prompt for method, args, _ in executor.calls if method == "encode_prompt"] == list(WARM_UP_PROMPTS)
    assert [args for method, args, _ in executor.calls if method == "set_op_deadline"] == [(COMPILE_OP_S,),
                                                                                           (STEP_OP_S,)]
    assert pipeline.compiled_keys == {graph_key(_request(64))}
    assert pipeline.deadlines.compile_s == 0.0


def test_only_the_first_forward_of_a_new_shape_gets_the_compile_allowance():
    executor = RecordingExecutor()
    pipeline = _pipeline(executor)
    pipeline.warm_up(_request(64))
    executor.calls.clear()
    outcomes = list(pipeline.run([_request(64), _request(96), _request(96)]))
    assert len(outcomes) == 3
    steps = [(args, timeout) for method, args, timeout in executor.calls if method == "step"]
    widened = [timeout for _, timeout in steps if timeout == COMPILE_CALL_S]
    assert [timeout for _, timeout in steps] == [STEP_CALL_S, STEP_CALL_S,  # the warmed-up shape
                                                 COMPILE_CALL_S, STEP_CALL_S,  # 96: its first forward compiles
                                                 STEP_CALL_S, STEP_CALL_S]  # 96 again: compiled
    assert len(widened) == 1
    executor.calls.clear()
    list(pipeline.run([_request(96), replace(_request(96), guidance_scale=1.0)]))
    steps = [timeout for method, _, timeout in executor.calls if method == "step"]
    assert steps == [STEP_CALL_S, STEP_CALL_S, COMPILE_CALL_S, STEP_CALL_S]  # unguided: one branch, new graphs
    deadlines_sent = [args[0] for method, args, _ in executor.calls if method == "set_op_deadline"]
    assert deadlines_sent == [COMPILE_OP_S, STEP_OP_S]  # around that forward only
    assert pipeline.deadlines.slowest_step_s < 1.0  # the compiling forward was not observed as a step


def test_the_ranks_compile_allowance_stays_below_the_group_timeout():
    from pipedit.runtime.deadlines import Deadlines

    deadlines = Deadlines(ReliabilityConfig(group_timeout_s=300.0, first_compile_s=600.0))
    with deadlines.compiling():
        assert deadlines.op_s == OP_SHARE_OF_GROUP_TIMEOUT * 300.0  # NCCL's watchdog must not fire first
        assert deadlines.call_s == deadlines.op_s + 60.0 + 600.0  # the driver waits the whole allowance
    assert deadlines.call_s == 120.0
