"""A served replica whose rank group spans the two worker nodes (parallel.nodes 2, Ulysses 2 x Ring
2): Serve places its STRICT_SPREAD placement group (the replica and two ranks on one node, two ranks
on the other), the replica finds the data folder pipedit serve marked, and a job completes."""

import json
import time
import urllib.request

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig, ServeConfig
from pipedit.distributed.spawn import free_tcp_port

pytestmark = pytest.mark.slow  # a cluster of three nodes, end-to-end runs


def _alive_rank_nodes() -> list[str]:
    import ray
    from ray.util.state import list_actors

    return [a.node_id for a in list_actors(address=ray.get_runtime_context().gcs_address, limit=1000,
                                           filters=[("class_name", "=", "DenoiseWorker"), ("state", "=", "ALIVE")])]


def _json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_a_replica_over_two_nodes_serves_a_job(cluster, demo_checkpoint, tmp_path):
    from ray import serve

    from pipedit.serve import data_folder
    from pipedit.serve.deployment import APP_NAME, build_application, replica_bundles, spreads
    from pipedit.serve.placement import check_placement, cluster_nodes, replica_demand

    port = free_tcp_port()
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)),
                          parallel=ParallelConfig(ulysses=2, ring=2, nodes=2),
                          generation=GenerationDefaults(height=32, width=32, num_frames=5, steps=2),
                          serve=ServeConfig(port=port, data_dir=str(tmp_path)))
    assert replica_bundles(config) == [{"CPU": 3}, {"CPU": 2}] and spreads(config)
    check_placement(replica_demand(replica_bundles(config), spreads(config)), 1, cluster_nodes())
    try:
        serve.start(proxy_location=config.serve.proxy_location, http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_application(config, data_folder.mark(tmp_path)), name=APP_NAME, route_prefix="/",
                  blocking=False)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while serve.status().applications.get(APP_NAME) is None or \
                serve.status().applications[APP_NAME].status != "RUNNING":
            assert time.monotonic() < deadline, serve.status()
            time.sleep(0.5)
        assert sorted(_alive_rank_nodes()) == sorted(w.node_id for w in cluster.workers for _ in range(2))
        job = _json(f"{url}/v1/videos", {"prompt": "a lighthouse", "size": "32x32", "num_frames": 5,
                                         "num_inference_steps": 2})
        while (state := _json(f"{url}/v1/videos/{job['id']}"))["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, state
            time.sleep(0.5)
        assert state["status"] == "completed", state
        assert (tmp_path / "videos" / f"{job['id']}.mp4").is_file()
    finally:
        serve.shutdown()
