"""Which Ray every command runs on (serve, generate, render, the benchmarks, check-node): the
cluster `--address` or RAY_ADDRESS names, else an instance of the command's own.

Never a stray one: a plain `ray.init()` (or `ray.init(num_cpus=...)`) looks for a cluster in
Ray's temp folder (`ray_current_cluster`), a file a head that was killed leaves behind; Ray then
tries to attach to it, or refuses num_cpus ("When connecting to an existing cluster, num_cpus and
num_gpus must not be provided"). An instance of our own is asked for with address="local".

An instance of our own serves one machine only, so all of it (GCS, raylet, agents, workers)
listens on loopback: nothing from another host can reach it. Token authentication stays as
Ray sets it (on by default for new instances in Ray 2.60); pipedit never turns it off.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

LOCAL = "local"


def cluster_address(address: str | None = None) -> str | None:
    """The cluster to attach to: `address`, else RAY_ADDRESS; None (or "local"): start our own."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    return None if address == LOCAL else address


def connect_ray(address: str | None = None, *, num_cpus: int, **options) -> bool:
    """Attaches to the cluster `address` (else RAY_ADDRESS) names, or starts an instance of this
    process's own with `num_cpus` logical CPUs, bound to loopback. `options`: ray.init's others
    (logging, dashboard). Returns whether this process owns the instance (`stop_ray` ends it)."""
    import ray

    options.setdefault("include_dashboard", False)
    options.setdefault("logging_level", logging.WARNING)
    attach = cluster_address(address)
    if attach is not None:
        ray.init(address=attach, **options)
        return False
    with _loopback_node():
        ray.init(address=LOCAL, num_cpus=num_cpus, **options)
    return True


def ensure_ray(world_size: int) -> bool:
    """A Ray for `world_size` rank actors, unless this process is connected already: a logical
    CPU per rank even on small machines (ranks share cores; gloo still works). Returns whether
    this call started an instance of its own."""
    import ray

    if ray.is_initialized():
        return False
    return connect_ray(num_cpus=max(os.cpu_count() or 1, world_size))


def stop_ray(owned: bool) -> None:
    """Ends this process's Ray session; the whole instance goes when `owned` (connect_ray's answer)."""
    import ray

    if owned:
        ray.shutdown()


@contextmanager
def _loopback_node():
    """While Ray starts an instance, its node IP is loopback, and every server of the instance
    binds that IP. Ray 2.60 takes the node IP from services.get_node_ip_address, which answers
    loopback while ray_constants.ENABLE_RAY_CLUSTER (env RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER, read
    at import) is false; `_node_ip_address="127.0.0.1"` does not do it (ray.init swaps a loopback
    address for the machine's). Hazard: a private switch, re-checked on every Ray upgrade by
    tests/runtime/test_ray_instance.py (it lists the sockets the instance listens on)."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
