"""Two Ray Serve replicas (num_replicas: 2) on one PostgreSQL store and one data folder: 6 jobs,
the replica running one of them killed mid-run; all 6 complete exactly once (one completed row
per job, the killed job re-run as attempt 2 by a live replica, one mp4 per job)."""

import time

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ServeConfig
from pipedit.distributed.spawn import free_tcp_port
from pipedit.serve.jobs.store import JobStore
from pipedit.video import read_mp4
from serve_helpers import call, call_until_stored, wait_for

JOB = {"size": "32x32", "num_frames": 5, "num_inference_steps": 30}


def _serve_app(config, port):
    from ray import serve

    from pipedit.serve.ray_app.deployment import APP_NAME, build_application
    from pipedit.serve.ray_app.launch import start_serve

    start_serve(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_application(config), name=APP_NAME, route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{port}"

    def both_running():
        status = serve.status().applications.get(APP_NAME)
        if status is None or status.status != "RUNNING":
            return False
        return status.deployments["PipeditServer"].replica_states.get("RUNNING", 0) == 2

    wait_for(both_running, timeout=180, every=0.5)
    return url


def _kill_replica(unique_id):
    import ray

    names = [a for a in ray.util.list_named_actors(all_namespaces=True) if unique_id in a["name"]]
    assert len(names) == 1, names
    ray.kill(ray.get_actor(names[0]["name"], namespace=names[0]["namespace"]), no_restart=True)


@pytest.mark.slow
def test_two_replicas_lose_nothing_when_one_dies(ray_session, demo_checkpoint, postgres, tmp_path):
    from ray import serve

    port, database_url = free_tcp_port(), postgres.new_database()
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)),
                          generation=GenerationDefaults(height=32, width=32, num_frames=5, steps=2),
                          serve=ServeConfig(port=port, data_dir=str(tmp_path), database_url=database_url,
                                            num_replicas=2, job_lease_s=3))
    store = JobStore(database_url)
    try:
        url = _serve_app(config, port)
        ids = []
        for i in range(6):
            created = call_until_stored("POST", f"{url}/v1/videos", {"prompt": f"job {i}", **JOB})
            assert created.status == 200, created.body
            ids.append(created.json()["id"])
        wait_for(lambda: any(r.status == "in_progress" for r in store.unfinished()), timeout=120)
        running = next(r for r in store.unfinished() if r.status == "in_progress")
        _kill_replica(running.owner.split("@")[0])
        killed_at = time.monotonic()
        while not all(store.get(i).status == "completed" for i in ids):
            assert time.monotonic() - killed_at < 300, [(r.id, r.status, r.owner) for r in store.unfinished()]
            assert call("GET", f"{url}/healthz").status == 200  # the other replica answers throughout
            time.sleep(0.5)
        rows = [store.get(i) for i in ids]
        assert all(r.status == "completed" and r.progress == 100 for r in rows)
        redone = store.get(running.id)
        assert redone.attempt == 2 and redone.owner != running.owner
        videos = sorted(p.name for p in (tmp_path / "videos").iterdir())
        assert videos == sorted(f"{i}.mp4" for i in ids)  # one file per job, nothing left aside
        assert read_mp4(tmp_path / "videos" / f"{running.id}.mp4").shape == (5, 32, 32, 3)
        print("exactly once:", [(r.id[-6:], r.attempt, r.owner.split("@")[0]) for r in rows])
    finally:
        serve.shutdown()
        store.close()
