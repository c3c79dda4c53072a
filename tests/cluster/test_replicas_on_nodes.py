"""Serve replicas on a cluster: two 2-rank replicas (serve.num_replicas 2, Ulysses 2) land on the two
worker nodes; a worker node is removed (its raylet and every process on it killed) while 6 jobs
run: all 6 complete, each exactly once, and /healthz (through the head's HTTP proxy, HeadOnly, to
the /healthz front on the head) answers 200 throughout, without waiting for the lost node (times as
tests/health_probes.py bounds them), saying when fewer replicas run;
a node that joins then takes Serve's replacement replica. Prints the time from the node's loss to
the last job done and the slowest /healthz."""

import json
import time
import urllib.error
import urllib.request

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig, ServeConfig
from pipedit.distributed.spawn import free_tcp_port
from pipedit.serve.jobs.store import JobStore

from health_probes import LIMIT_S, ProbeTimes

pytestmark = pytest.mark.slow  # a cluster of three nodes, end-to-end runs
JOB = {"size": "32x32", "num_frames": 5, "num_inference_steps": 20}
LEASE_S = 3.0
REPLICA_CLASS = "ServeReplica:pipedit:PipeditServer"


def _get(url: str, timeout: float) -> tuple[int, dict]:
    """The HTTP status and JSON body; raises past `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {}


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _wait(condition, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def _live_replicas() -> list:
    """The live replica actors (Ray's state API): actor_id, node_id, pid."""
    import ray
    from ray.util.state import list_actors

    return list_actors(address=ray.get_runtime_context().gcs_address, limit=100,
                       filters=[("class_name", "=", REPLICA_CLASS), ("state", "=", "ALIVE")])


def _replica_nodes() -> dict[str, str]:
    """Live replica actor id -> node id."""
    return {a.actor_id: a.node_id for a in _live_replicas()}


@pytest.fixture(scope="module")
def served(cluster, demo_checkpoint, tmp_path_factory):
    from ray import serve

    from pipedit.serve.ray_app.deployment import replica_bundles, spreads
    from pipedit.serve.ray_app.launch import run_applications, start_serve
    from pipedit.serve.ray_app.placement import check_placement, cluster_nodes, replica_demand

    data = tmp_path_factory.mktemp("cluster-data")  # every node of this test cluster shares the disk
    port = free_tcp_port()
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)), parallel=ParallelConfig(ulysses=2),
                          generation=GenerationDefaults(height=32, width=32, num_frames=5, steps=2),
                          serve=ServeConfig(port=port, data_dir=str(data), num_replicas=2, job_lease_s=LEASE_S))
    check_placement(replica_demand(replica_bundles(config), spreads(config)), 2, cluster_nodes())
    try:
        start_serve(proxy_location=config.serve.proxy_location, http_options={"host": "127.0.0.1", "port": port})
        run_applications(config)
        _wait(lambda: _running_replicas() == 2 and _get(f"http://127.0.0.1:{port}/healthz", LIMIT_S)[0] == 200,
              timeout=300)  # LIMIT_S: a busy machine delays single probes (tests/health_probes.py)
        yield f"http://127.0.0.1:{port}", data
    finally:
        serve.shutdown()


def test_two_replicas_land_on_different_nodes(cluster, served):
    nodes = _replica_nodes()
    assert len(nodes) == 2 and set(nodes.values()) == {worker.node_id for worker in cluster.workers}


def test_a_node_lost_under_load_loses_no_job(cluster, served):
    url, data = served
    store = JobStore.in_folder(data)
    try:
        ids = [_post(f"{url}/v1/videos", {"prompt": f"job {i}", **JOB})["id"] for i in range(6)]
        _wait(lambda: len({r.owner for r in store.unfinished() if r.owner}) == 2, timeout=120, every=0.1)
        replicas = {a.node_id: a for a in _live_replicas()}  # a job's owner names its replica's process id
        held = {r.id: r.owner for r in store.unfinished() if r.owner}  # at the loss: a replica moves on as it finishes
        holding = {_owner_pid(owner) for owner in held.values()}
        victim = next(w for w in cluster.workers if w.node_id in replicas and replicas[w.node_id].pid in holding)
        lost_pid, lost_replica = replicas[victim.node_id].pid, replicas[victim.node_id].actor_id
        cluster.nodes.remove_node(victim, allow_graceful=False)
        cluster.workers.remove(victim)
        lost_at, probes, failed, said = time.monotonic(), ProbeTimes(), [], set()
        while not all(store.get(i).status == "completed" for i in ids):
            assert time.monotonic() - lost_at < 240, [(r.id, r.status, r.owner) for r in store.unfinished()]
            asked = time.monotonic()
            status, body = probes.timed(lambda: _get(f"{url}/healthz", timeout=LIMIT_S))  # raises past the limit
            said.add(body.get("reason", body.get("status")))
            if status != 200:
                failed.append((round(asked - lost_at, 1), status))
            time.sleep(0.2)
        recovered_s = time.monotonic() - lost_at
        assert not failed, failed
        probes.check()
        rows = [store.get(i) for i in ids]
        assert all(r.status == "completed" and r.progress == 100 for r in rows)
        assert sorted(p.name for p in (data / "videos").iterdir()) == sorted(f"{i}.mp4" for i in ids)  # once each
        # The lost node's jobs ran again on the other replica; none the other replica held at the loss did.
        rerun = [r for r in rows if r.attempt > 1]
        assert rerun and all(_owner_pid(r.owner) != lost_pid for r in rerun), (lost_pid, rerun)
        assert all(_owner_pid(held[r.id]) == lost_pid for r in rerun if r.id in held), (lost_pid, held, rerun)
        print(f"node lost -> last job done: {recovered_s:.1f} s (lease {LEASE_S:g} s); /healthz "
              f"{probes.summary()}, saying {sorted(said)}; re-run: {len(rerun)} job(s); lost replica "
              f"{lost_replica[:8]}")
        # No room for Serve's replacement until a node joins: it serves with one replica meanwhile and
        # /healthz says so once Serve has counted the loss. The node that joins takes the replacement
        # (and the next tests have two worker nodes again).
        _wait(lambda: _reason(url).startswith("1 of 2 replicas running"), timeout=120)
        print(f"node lost -> /healthz says 1 of 2 replicas: {time.monotonic() - lost_at:.1f} s")
        joined_at = time.monotonic()
        cluster.add_worker()
        live = {worker.node_id for worker in cluster.workers}
        _wait(lambda: sorted(_replica_nodes().values()) == sorted(live) and _running_replicas() == 2, timeout=300)
        _wait(lambda: _get(f"{url}/healthz", timeout=LIMIT_S) == (200, {"status": "ok"}), timeout=60)
        print(f"node joined -> replacement replica running: {time.monotonic() - joined_at:.1f} s")
    finally:
        store.close()
        if len(cluster.workers) < 2:  # the next tests need two worker nodes
            cluster.add_worker()


def _owner_pid(owner: str) -> int:
    """The process id in a job's owner, "<replica>@<host>:<pid>:<tag>" (serve/ray_app/deployment.py)."""
    return int(owner.rsplit("@", 1)[1].split(":")[1])


def _reason(url: str) -> str:
    status, body = _get(f"{url}/healthz", timeout=LIMIT_S)
    assert status == 200, (status, body)
    return body.get("reason", "")


def _running_replicas() -> int:
    from ray import serve

    from pipedit.serve.ray_app.deployment import APP_NAME

    status = serve.status().applications.get(APP_NAME)
    return 0 if status is None else status.deployments["PipeditServer"].replica_states.get("RUNNING", 0)
