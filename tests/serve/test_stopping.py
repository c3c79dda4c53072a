"""`pipedit serve`'s stop, without Ray (ray_app/stopping.py): the review's SIGTERMs on a busy
machine left a running job in_progress with its owner and lease, a claimed next job queued with
an owner, and /healthz "ok" for 25 s. Here: the stop file makes a replica take no new job and the
/healthz front answer down at once; the stop hands every job of its run back in the store itself,
after the grace period, and leaves other servers' jobs alone. And a Ray that does not start in
time is one line (exit 2), not a traceback; a step of the stop that runs out of time is left. The
whole stop under Ray: test_serve_startup.py."""

import asyncio
import time
from types import SimpleNamespace

import pytest

from pipedit.config import EngineConfig, ServeConfig
from pipedit.errors import UserInputError
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.ray_app import launch, stopping
from pipedit.serve.ray_app.health_front import HealthFront, ReplicaCount
from job_engines import service_on
from serve_helpers import IdleEngine, wait_for

RUN = "0123456789ab"


def test_the_stop_hands_the_runs_jobs_back_in_the_store_after_the_grace_period(tmp_path):
    engine = IdleEngine()  # a job it is given stays in it: a run that never ends by itself
    service = service_on(engine, tmp_path, owner=f"{stopping.owner_prefix(RUN)}replica@host:1:ab")
    elsewhere = service_on(IdleEngine(), tmp_path / "other", owner="another-server@host:2:cd")
    try:
        running = service.create(VideoCreateParams(prompt="a fox"))
        waiting = service.create(VideoCreateParams(prompt="a boat"))
        wait_for(lambda: engine.submitted == [running.id], timeout=30)
        assert service.store.claim(service.owner, 20.0).id == waiting.id  # a claimed next job: queued, owned
        held = service.store.get(running.id)
        assert service.store.update_owned(running.id, held.owner, held.attempt, status="in_progress")
        stopping.watch(tmp_path, RUN, service.drain, service.dispatcher.closing.is_set)
        stopping.announce(tmp_path, RUN)
        announced_at = time.monotonic()
        wait_for(lambda: not service.healthy(), timeout=5)  # no new claims; /healthz down
        assert service.health()[0] == "down"
        freed = stopping.hand_back(service.store, RUN, 0.5, announced_at)
        assert time.monotonic() - announced_at >= 0.5  # the running job had its grace period
        assert sorted(freed) == sorted([running.id, waiting.id])
        for job_id in (running.id, waiting.id):
            row = service.store.get(job_id)
            assert (row.status, row.owner, row.lease_until) == ("queued", None, None), row
        # Another server's job on a shared store is not this stop's to hand back.
        other = elsewhere.create(VideoCreateParams(prompt="a cat"))
        wait_for(lambda: elsewhere.store.get(other.id).owner is not None, timeout=30)
        assert stopping.hand_back(elsewhere.store, RUN, 0.0, time.monotonic() - 1) == []
    finally:
        service.close()
        elsewhere.close()
        service.store.close()
        elsewhere.store.close()


def test_the_hand_back_does_not_wait_when_nothing_runs(tmp_path):
    service = service_on(IdleEngine(), tmp_path)
    try:
        start = time.monotonic()
        assert stopping.hand_back(service.store, RUN, 30.0, start - 1) == []
        assert time.monotonic() - start < 5
    finally:
        service.close()
        service.store.close()


def test_the_health_front_answers_down_once_the_stop_is_announced(tmp_path):
    config = EngineConfig(serve=ServeConfig(num_replicas=1, data_dir=str(tmp_path)))
    replicas = SimpleNamespace(health=SimpleNamespace(remote=lambda: asyncio.sleep(0, ("ok", None))))
    front = SimpleNamespace(config=config, replicas=replicas, run=RUN, folder=tmp_path,
                            count=ReplicaCount(lambda: 1))
    assert asyncio.run(HealthFront.answer(front)) == ("ok", None)
    stopping.announce(tmp_path, RUN)
    status, reason = asyncio.run(HealthFront.answer(front))
    assert status == "down" and "stopping" in reason
    stopping.withdraw(tmp_path, RUN)
    assert asyncio.run(HealthFront.answer(front)) == ("ok", None)


def test_a_ray_that_does_not_start_in_time_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    from pipedit.cli import main
    from pipedit.runtime import ray_instance

    def timed_out(*_args, **_kwargs):  # what ray.init raises (ray/_private/node.py)
        raise Exception("The current node timed out during startup. This could happen because some of the "
                        "raylet failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray_instance, "connect_ray", timed_out)
    monkeypatch.setattr(launch, "_stop_on_signals", lambda _received: None)  # pytest keeps its own handlers
    with pytest.raises(UserInputError, match="timed out during startup.*start again"):
        launch._connect_ray(EngineConfig(), None)
    from pipedit.serve import header_timeout

    for name in (header_timeout.CALLBACK_ENV, header_timeout.TIMEOUT_ENV, header_timeout.MAX_BYTES_ENV,
                 header_timeout.MAX_LINES_ENV, header_timeout.MAX_BODY_ENV, header_timeout.MAX_UPLOAD_ENV):
        monkeypatch.setenv(name, "")  # the command sets them; monkeypatch takes them back
        monkeypatch.delenv(name)
    assert main(["serve", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipedit: error: Ray's node did not come up"), err
    assert "Traceback" not in err


def test_a_step_of_the_stop_that_runs_out_of_time_or_fails_is_left_with_one_line(capsys):
    """The stop's steps are bounded (launch._bounded): a step still blocked at its limit is left
    running in its thread and the stop goes on, saying what happens instead; a failure says why."""
    import threading

    release = threading.Event()  # set only once _bounded returned: a _bounded that waited for it would hang
    launch._bounded(release.wait, 1.0, "handing the running jobs back to the store", "their leases lapse")
    release.set()
    assert capsys.readouterr().err == ("pipedit: handing the running jobs back to the store took more than 1 s; "
                                       "their leases lapse\n")

    def fails():
        raise OSError("database is locked")

    launch._bounded(fails, 30, "stopping the app", "the cluster goes on stopping it")
    assert capsys.readouterr().err == ("pipedit: stopping the app failed (database is locked); the cluster goes on "
                                       "stopping it\n")
