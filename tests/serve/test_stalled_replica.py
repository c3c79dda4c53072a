"""A replica whose rank group cannot be rebuilt (its node lost a GPU, or its Ray node is gone) stops
renewing the leases of the jobs it holds, claims nothing new and says it is unfit (Serve's
check_health), so another replica runs its jobs; once a rebuild works it is fit again."""

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from pipedit.request import RequestCancelled, RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.runtime.rank_failure import PlacementAwaitsNode, RankGroupError
from pipedit.serve.contract.schemas import VideoCreateParams
from job_engines import FakeEngine, InstantEngine, service_on
from serve_helpers import wait_for


def _group_dies_once(run, request: VideoRequest):
    """The first run breaks the rank group; later runs make a grey video."""
    if len(run.submits) == 1:
        yield from run.failed(request, "denoise", RankGroupError("rank 1 (denoise) died: its node is gone", 1))
    else:
        yield VideoResult(request.request_id, torch.full((5, 8, 8, 3), 0.5), torch.zeros(1))


def _loop_whose_rebuilds_fail(script, why: str, error=RuntimeError):
    """(the fake engine, an EngineLoop over it, an Event): every rebuild fails with error(why) until
    the event is set (the lost node is back)."""
    engine = FakeEngine(script, retries=5)
    node_back = threading.Event()
    loop = EngineLoop(engine)
    engine.started.wait(5)
    real_recover = engine.run.recover

    def recover():
        if not node_back.is_set():
            raise error(why)
        return real_recover()

    engine.run.recover = recover
    return engine, loop, node_back


def test_a_replica_that_cannot_rebuild_hands_its_jobs_to_another(tmp_path):
    _, loop, node_back = _loop_whose_rebuilds_fail(_group_dies_once, "no room for the rank group's placement group")
    stalled = service_on(loop, tmp_path, lease_s=1.0, owner="stalled")
    other = None
    try:
        job = stalled.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: loop.stalled, timeout=15)
        assert "cannot be rebuilt" in stalled.unfit() and "no room" in stalled.unfit()
        assert stalled.health()[0] == "degraded"
        # Its lease is not renewed: the job goes back to the queue and the stalled replica leaves it there.
        wait_for(lambda: stalled.store.get(job.id).owner is None, timeout=10)
        assert stalled.store.get(job.id).status == "queued"
        other = service_on(InstantEngine(), tmp_path, lease_s=1.0, owner="other")
        wait_for(lambda: stalled.store.get(job.id).status == "completed", timeout=15)
        done = stalled.store.get(job.id)
        assert (done.owner, done.attempt) == ("other", 2)
        node_back.set()  # the next rebuild works: fit again, and the old attempt changes nothing
        wait_for(lambda: not loop.stalled, timeout=15)
        assert stalled.unfit() is None and loop.health == ("ok", None)
        wait_for(lambda: not stalled.dispatcher.holds(job.id), timeout=15)
        assert stalled.store.get(job.id) == done
    finally:
        stalled.shutdown()
        if other is not None:
            other.close()


def _group_dies_once_then_done(run, request: VideoRequest):
    """_group_dies_once, with the final event the engine sends before a video (the job service
    takes the outcome on that event)."""
    for outcome in _group_dies_once(run, request):
        if isinstance(outcome, VideoResult):
            run.emit(RequestEvent(request.request_id, RequestStatus.DONE))
        yield outcome


@pytest.mark.parametrize("replicas", [1, 2])
def test_the_only_replica_whose_group_awaits_its_node_is_not_replaced(tmp_path, replicas):
    """Its group waits for Ray to place it again (the executor's PlacementAwaitsNode): a new
    replica's would wait for the same room, and no replica would run meanwhile, so the only replica
    is not unfit (degraded, saying why) and runs the job once rebuilt; one of two is unfit."""
    why = "this replica's placement group is RESCHEDULING: a node that held its ranks is gone"
    _, loop, node_back = _loop_whose_rebuilds_fail(_group_dies_once_then_done, why, PlacementAwaitsNode)
    service = service_on(loop, tmp_path, lease_s=1.0, owner="waiting", replicas=replicas)
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: loop.stalled, timeout=15)
        assert loop.awaits_placement
        status, reason = service.health()
        assert status == "degraded" and why in reason
        if replicas == 2:
            assert "cannot be rebuilt" in service.unfit() and why in service.unfit()
            return
        assert service.unfit() is None
        node_back.set()
        wait_for(lambda: service.store.get(job.id).status == "completed", timeout=30)
        assert not loop.awaits_placement and service.unfit() is None
    finally:
        service.shutdown()


def _retry_runs_until_cancelled(run, request: VideoRequest):
    """The first run breaks the rank group; the engine's own retry (after the rebuild) runs until
    it is cancelled, and ends half a second later; later runs make a grey video."""
    if len(run.submits) == 1:
        yield from run.failed(request, "denoise", RankGroupError("rank 2 (denoise) died: its node is gone", 2))
    elif len(run.submits) == 2:
        while not run.is_cancelled(request.request_id):
            time.sleep(0.01)
        time.sleep(0.5)  # a pipeline notices a cancellation at its next step
        run.emit(RequestEvent(request.request_id, RequestStatus.CANCELLED))
        yield RequestFailure(request.request_id, "denoise", RequestCancelled(request.request_id))
    else:
        run.emit(RequestEvent(request.request_id, RequestStatus.DONE))
        yield VideoResult(request.request_id, torch.full((5, 8, 8, 3), 0.5), torch.zeros(1))


def test_the_only_replica_runs_its_job_again_after_a_stall_and_its_old_attempt_cancels_nothing(tmp_path):
    """What a replica whose rank group spans nodes meets when it loses one and no other replica
    runs: the stall lets the lease lapse and the job goes back to the queue; once rebuilt, the
    replica cancels its old attempt (still in its engine) and takes the job again. The old
    attempt's cancellation must not end the new one: the job completes as attempt 2."""
    engine, loop, node_back = _loop_whose_rebuilds_fail(_retry_runs_until_cancelled,
                                                        "this replica's placement group is RESCHEDULING")
    service = service_on(loop, tmp_path, lease_s=1.0, owner="only")
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: loop.stalled, timeout=15)
        wait_for(lambda: service.store.get(job.id).owner is None, timeout=10)  # the lease lapsed
        node_back.set()
        wait_for(lambda: service.store.get(job.id).status not in ("queued", "in_progress"), timeout=20)
        done = service.store.get(job.id)
        assert (done.status, done.owner, done.attempt) == ("completed", "only", 2), done
        assert engine.run.submits == [job.id] * 3
    finally:
        service.shutdown()


def test_a_stopped_engine_loop_is_unfit_but_a_closing_service_is_not(tmp_path):
    engine = InstantEngine()
    service = service_on(engine, tmp_path)
    try:
        assert service.unfit() is None
        engine.accepting = False
        assert service.unfit() == "the engine loop has stopped"
    finally:
        service.close()
    assert service.unfit() is None  # draining on purpose


def test_serve_health_check_fails_while_the_replica_is_unfit():
    from pipedit.serve.ray_app.deployment import PipeditServer

    reason = ["the rank group cannot be rebuilt: no room"]
    replica = SimpleNamespace(service=SimpleNamespace(unfit=lambda: reason[0]))
    with pytest.raises(RuntimeError, match="cannot be rebuilt"):
        asyncio.run(PipeditServer.check_health(replica))  # a coroutine: Serve runs it on the replica's loop
    reason[0] = None
    assert asyncio.run(PipeditServer.check_health(replica)) is None
