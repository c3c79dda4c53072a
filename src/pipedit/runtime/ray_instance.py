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

import contextlib
import logging
import os
import sys

from ..compat import loopback_node

LOCAL = "local"
START_TIMEOUT = "timed out during startup"  # ray.init's words when its raylet did not register in time


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
    _start_own(num_cpus, options)
    return True


def _start_own(num_cpus: int, options: dict) -> None:
    """ray.init of an instance of our own, tried twice. Ray waits a fixed 30 s for its raylet to
    register and then raises with START_TIMEOUT (seen on a busy machine), leaving the processes it
    started running: the Node that owns them is never returned. They are killed after each such
    failure, so that a failed try leaves nothing behind."""
    import ray

    for attempt in (1, 2):
        before = _process_tree()
        try:
            with loopback_node():  # a private switch of Ray's: pipedit.compat
                ray.init(address=LOCAL, num_cpus=num_cpus, **options)
            return
        except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception for it
            if START_TIMEOUT not in str(error):
                raise
            _kill_started_since(before)
            if attempt == 2:
                raise
        print("pipedit: Ray's node did not register within Ray's 30 s (a busy machine?); starting it once more",
              file=sys.stderr, flush=True)


def _process_tree() -> set[int]:
    import psutil  # a dependency of accelerate and peft

    return {each.pid for each in psutil.Process().children(recursive=True)}


def _kill_started_since(before: set[int]) -> None:
    import psutil

    started = [each for each in psutil.Process().children(recursive=True) if each.pid not in before]
    for each in started:
        with contextlib.suppress(psutil.Error):
            each.kill()
    psutil.wait_procs(started, timeout=10)


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
