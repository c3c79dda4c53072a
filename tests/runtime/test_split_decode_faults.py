"""A decode rank killed in the split decode's broadcast (PIPEDIT_FAULTS op=broadcast), on Ray actors
(gloo): 1 denoise rank and 2 decode ranks sharing each video's decode. The group is rebuilt, the
request is run again and completes, decoded by both ranks again.

The step cache's all_reduce is the other collective that only fault injection by op can reach; its
case runs on the served engine of tests/serve/test_rank_failures.py (KILL-AR)."""

import threading
import time

import pytest

from pipedit.config import EngineConfig, ModelConfig, ParallelConfig, ReliabilityConfig
from pipedit.faults import ENV
from pipedit.request import RequestFailure, RequestStatus, VideoRequest
from pipedit.runtime.engine_loop import EngineLoop

pytestmark = pytest.mark.slow
BOUND_S = 240.0  # group start, detection (a killed peer fails gloo at once) and a rebuild, on 2 loaded cores


def test_a_decode_rank_killed_in_the_split_broadcast_is_replaced_and_the_video_completes(
        ray_session, demo_checkpoint, monkeypatch):
    # The driver's environment: the executor hands PIPEDIT_FAULTS (and a `once` folder) to its ranks.
    monkeypatch.setenv(ENV, "kill:op=broadcast:rank=2:prompt=KILL-BC:once")
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)),
                          parallel=ParallelConfig(decode_ranks=2),
                          reliability=ReliabilityConfig(op_deadline_floor_s=20, group_timeout_s=120, retries=1))
    # 5 latent frames: diffusers' two temporal chunks, so the idle decode group splits the video.
    request = VideoRequest("a fox KILL-BC", height=64, width=96, num_frames=17, steps=1)
    events, health, stop = [], set(), threading.Event()
    with EngineLoop.from_config(config) as engine:
        engine.add_listener(events.append)

        def poll():
            while not stop.is_set():
                health.add(engine.health[0])
                time.sleep(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            engine.submit(request)
            outcome = engine.wait(request.request_id, timeout=BOUND_S)
        finally:
            stop.set()
            poller.join(timeout=5)
    assert not isinstance(outcome, RequestFailure), outcome.message
    assert "degraded" in health, "the rank group was never rebuilt: the fault did not fire"
    statuses = [e.status for e in events if e.request_id == request.request_id]
    assert statuses.count(RequestStatus.ENCODING) == 2  # run again after the rebuild
    assert outcome.timings["decode_ranks"] == 2  # and decoded by the whole (new) decode group
    assert tuple(outcome.frames.shape[-4:]) == (17, 64, 96, 3)
