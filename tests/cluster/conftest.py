"""One Ray cluster of a head and two worker nodes, all on this machine (ray.cluster_utils.Cluster:
each node its own raylet to the scheduler), shared by every test in this folder: starting one
costs seconds and about a GB. The head has no room for a rank group, so rank groups land on the
workers; a test that removes a worker adds one back (`add_worker`) before it ends."""

import os
from types import SimpleNamespace

import pytest

HEAD_CPUS = 1
WORKER_CPUS = 3  # one 2-rank replica (its bundle and two ranks), or one node's half of a 4-rank group
# Ray marks a node dead after this many missed health checks this far apart (its defaults: 5 x 3 s),
# so the node-loss tests wait seconds, not 15, for Ray to see the loss.
FAST_NODE_DEATH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}


@pytest.fixture(autouse=True)
def no_rank_group_kept():
    """The worker nodes have room for one test's ranks: a rank group kept idle after a test
    (pipedit.runtime.kept_ranks) would hold a worker's CPUs from the next one."""
    from pipedit.runtime.kept_ranks import end_kept

    yield
    end_kept()


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="package")
def cluster(engines):
    import ray
    from ray.cluster_utils import Cluster

    from pipedit.runtime.kept_ranks import end_kept
    from session_ray import connect_session_ray

    had_ray = ray.is_initialized()  # another folder's ray_session: give it back afterwards
    engines.close()  # their rank actors live in the Ray that ends here
    end_kept()  # and those kept idle
    ray.shutdown()
    saved_address = os.environ.pop("RAY_ADDRESS", None)
    nodes = Cluster()
    try:
        # The head's dashboard (the state API the tests list actors through) on a free port of its
        # own: under pytest-xdist the other worker's session Ray may hold Ray's default 8265.
        head = nodes.add_node(num_cpus=HEAD_CPUS, _system_config=FAST_NODE_DEATH, include_dashboard=True,
                              dashboard_port=_free_port())
        workers = [nodes.add_node(num_cpus=WORKER_CPUS) for _ in range(2)]
        ray.init(address=nodes.address, logging_level="WARNING", log_to_driver=False)

        def add_worker():
            workers.append(nodes.add_node(num_cpus=WORKER_CPUS))
            return workers[-1]

        yield SimpleNamespace(nodes=nodes, head=head, workers=workers, address=nodes.address, add_worker=add_worker)
    finally:
        try:
            from ray import serve

            serve.shutdown()
        finally:
            ray.shutdown()
            nodes.shutdown()
            os.environ.pop("RAY_ADDRESS", None)  # a command's --address sets it (pipedit.cli.main)
            if saved_address is not None:
                os.environ["RAY_ADDRESS"] = saved_address
            if had_ray:
                connect_session_ray()
