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

from ..compat import loopback_node

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
    with loopback_node():  # a private switch of Ray's: pipedit.compat
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
