"""A served replica whose rank group spans the two worker nodes (parallel.nodes 2, Ulysses 2 x Ring
2): Serve places its STRICT_SPREAD placement group (the replica and two ranks on one node, two ranks
on the other), the replica finds the data folder pipedit serve marked, and a job completes.

Then the node that holds only ranks is removed and a job is sent: the rebuild is refused while
Ray's placement group lacks that node (rather than waiting rebuild_timeout_s with the job pinned),
/healthz answers 200 throughout (times as tests/health_probes.py bounds them) and says why (the only
replica is not replaced meanwhile: serve/jobs/service.py's unfit); a node joins, Ray places the group's
bundle there, the rebuild works and the job completes, once. Prints the time from the loss to the
job done."""

import json
import time
import urllib.error
import urllib.request

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig, ServeConfig
from pipedit.distributed.spawn import free_tcp_port

from health_probes import LIMIT_S, ProbeTimes

pytestmark = pytest.mark.slow  # a cluster of three nodes, end-to-end runs


def _alive_nodes(class_name: str) -> list[str]:
    import ray
    from ray.util.state import list_actors

    return [a.node_id for a in list_actors(address=ray.get_runtime_context().gcs_address, limit=1000,
                                           filters=[("class_name", "=", class_name), ("state", "=", "ALIVE")])]


def _json(url: str, body: dict | None = None, timeout: float = 60) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _done(url: str, job: dict, deadline: float, every=None) -> dict:
    """The job once it ended; calls every() between polls."""
    while (state := _status(url, job))["status"] not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, state
        if every:
            every()
        time.sleep(0.3)
    return state


def _status(url: str, job: dict) -> dict:
    """The job as GET /v1/videos/{id} says, or {"status": "no answer"} when the GET timed out (a
    replica that is being replaced answers nothing until the new one is up: over 60 s on a busy
    machine). The job's deadline bounds that wait; /healthz, answered by the front, is held to its
    own bound."""
    try:
        return _json(f"{url}/v1/videos/{job['id']}")
    except (TimeoutError, urllib.error.URLError) as error:
        if isinstance(error, urllib.error.URLError) and not isinstance(error.reason, TimeoutError):
            raise
        return {"status": "no answer"}


def test_a_replica_over_two_nodes_serves_a_job_and_survives_losing_one(cluster, demo_checkpoint, tmp_path):
    from ray import serve

    from pipedit.serve.ray_app import data_folder
    from pipedit.serve.ray_app.deployment import replica_bundles, spreads
    from pipedit.serve.ray_app.launch import run_applications, start_serve
    from pipedit.serve.ray_app.placement import check_placement, cluster_nodes, replica_demand

    port = free_tcp_port()
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)),
                          parallel=ParallelConfig(ulysses=2, ring=2, nodes=2),
                          generation=GenerationDefaults(height=32, width=32, num_frames=5, steps=2),
                          serve=ServeConfig(port=port, data_dir=str(tmp_path), job_lease_s=3))
    assert replica_bundles(config) == [{"CPU": 3}, {"CPU": 2}] and spreads(config)
    check_placement(replica_demand(replica_bundles(config), spreads(config)), 1, cluster_nodes())
    url = f"http://127.0.0.1:{port}"
    job = {"prompt": "a lighthouse", "size": "32x32", "num_frames": 5, "num_inference_steps": 2}
    try:
        start_serve(proxy_location=config.serve.proxy_location, http_options={"host": "127.0.0.1", "port": port})
        run_applications(config, data_folder.mark(tmp_path))
        deadline = time.monotonic() + 300
        while not _started(url):
            assert time.monotonic() < deadline, serve.status()
            time.sleep(0.5)
        assert sorted(_alive_nodes("DenoiseWorker")) == sorted(w.node_id for w in cluster.workers for _ in range(2))
        first = _json(f"{url}/v1/videos", job)
        assert _done(url, first, deadline)["status"] == "completed"
        assert (tmp_path / "videos" / f"{first['id']}.mp4").is_file()

        # The node holding only ranks is lost; a job arrives; the group cannot be rebuilt until a node joins.
        replica_node = _alive_nodes("ServeReplica:pipedit:PipeditServer")[0]
        spare = next(w for w in cluster.workers if w.node_id != replica_node)
        cluster.nodes.remove_node(spare, allow_graceful=False)
        cluster.workers.remove(spare)
        lost_at = time.monotonic()
        # Its ranks run on for a moment (a job sent now may complete there); Ray marks them dead
        # once its health checks of the node have failed.
        _wait_for(lambda: len(_alive_nodes("DenoiseWorker")) == 2, timeout=120)
        dead_at = time.monotonic()
        second = _json(f"{url}/v1/videos", job)
        said, probes = set(), ProbeTimes()

        def probe():
            said.add(probes.timed(lambda: _healthz(url, timeout=LIMIT_S)))  # raises past the limit, fails on a 5xx

        deadline = time.monotonic() + 120
        while not any("placement group is RESCHEDULING" in reason for reason in said):
            assert time.monotonic() < deadline, said
            probe()
            time.sleep(0.3)
        refused_at = time.monotonic()
        cluster.add_worker()
        state = _done(url, second, time.monotonic() + 240, every=probe)
        assert state["status"] == "completed", state
        assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == sorted(
            f"{j['id']}.mp4" for j in (first, second))
        assert sorted(_alive_nodes("DenoiseWorker")) == sorted(w.node_id for w in cluster.workers for _ in range(2))
        probes.check()
        print(f"node lost -> its ranks dead: {dead_at - lost_at:.1f} s -> rebuild refused: "
              f"{refused_at - lost_at:.1f} s; node joined -> job done: {time.monotonic() - refused_at:.1f} s; "
              f"/healthz {probes.summary()}; said {sorted(said)}")
    finally:
        serve.shutdown()
        if len(cluster.workers) < 2:
            cluster.add_worker()


def _wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _healthz(url: str, timeout: float) -> str:
    """/healthz's reason, else its status; a 5xx fails the test."""
    body = _json(f"{url}/healthz", timeout=timeout)
    return body.get("reason", body["status"])


def _started(url: str) -> bool:
    try:
        return _healthz(url, timeout=5) == "ok"
    except OSError:  # not listening yet, or no route yet (404), or starting (503)
        return False
