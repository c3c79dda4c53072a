"""Run a function on N local gloo ranks (spawned processes); used by tests and CPU benchmarks."""

from __future__ import annotations

import io
import os
import queue
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

_POLL_S = 0.2
_DEAD_GRACE_S = 1.0


class RankFailure(RuntimeError):
    """A spawned rank raised, died or timed out; the message holds the child's traceback."""


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` ("" for every interface, as a multi-node rendezvous needs)."""
    # Racy by nature (another process may grab it before the store binds), rarely a problem.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def run_on_gloo_ranks(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 120.0
) -> list[Any]:
    """Run fn(rank, world_size, *args) on `world_size` spawned gloo ranks; return their results.

    fn and args must be picklable (fn defined at module level). Raises RankFailure with the
    child's traceback if any rank raises or exits abnormally, and after `timeout_s` seconds
    (the remaining ranks are terminated, so a rank stuck in a collective never hangs the caller).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ctx = _rank_context()
    results: Any = ctx.Queue()
    # A file store in a new folder: a TCP store's port, chosen free here, may be taken by another
    # process before rank 0 binds it (EADDRINUSE, seen on busy machines).
    store_dir = tempfile.mkdtemp(prefix="pipedit-gloo-")
    init = f"file://{store_dir}/store"
    env = dict(os.environ)  # the caller's environment now, not the fork server's at its start
    procs = [
        ctx.Process(
            target=_child, args=(fn, rank, world_size, init, timeout_s, args, results, env), daemon=True
        )
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    try:
        return _collect(procs, results, world_size, timeout_s)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        results.close()
        shutil.rmtree(store_dir, ignore_errors=True)


# What every rank function imports; a module missing here is imported by the rank itself.
_PRELOAD = ("torch", "torch.distributed", "diffusers", "diffusers.models.transformers", "diffusers.models.autoencoders",
            __name__)


def _rank_context():
    """Ranks fork from a server process that imported _PRELOAD once (multiprocessing's forkserver,
    started at the first call and kept for this process's life): a rank starts in a fraction of a
    second instead of importing torch and diffusers again (about 2 CPU-seconds each; the attention
    and Wan parallel tests went from 77 to 12 CPU-seconds). The server only imports, it never runs
    torch ops, so no thread pool is forked; on platforms without fork, a fresh interpreter per rank."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(_PRELOAD))
    return ctx


def _child(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    init_method: str,
    timeout_s: float,
    args: tuple[Any, ...],
    results: Any,
    env: dict[str, str],
) -> None:
    # Hazard: a forked rank inherits the fork server's environment from when it started; the
    # caller's is put back first. Modules the server imported read theirs at the server's start;
    # torch.distributed's debug level (TORCH_DISTRIBUTED_DEBUG: DETAIL adds a monitored barrier to
    # every collective) is read again here.
    os.environ.clear()
    os.environ.update(env)
    dist.set_debug_level_from_env()
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=max(timeout_s, 1.0)),
        )
        value = fn(rank, world_size, *args)
        results.put((rank, True, _to_bytes(value)))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent as text
        results.put((rank, False, traceback.format_exc()))
        return
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - teardown after results were sent
        pass


def _to_bytes(value: Any) -> bytes:
    # Hazard: a tensor put on a multiprocessing queue as is travels as a file descriptor that the
    # child serves until it exits; a busy parent that reads after the child exited fails
    # (FileNotFoundError). Serialised bytes carry the data itself.
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


def _collect(procs: list[Any], results: Any, world_size: int, timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    values: dict[int, Any] = {}
    dead_since: float | None = None
    while len(values) < world_size:
        try:
            rank, ok, value = results.get(timeout=_POLL_S)
        except queue.Empty:
            pending = [r for r in range(world_size) if r not in values]
            if time.monotonic() > deadline:
                raise RankFailure(f"ranks {pending} did not finish within {timeout_s} s") from None
            dead = {r: procs[r].exitcode for r in pending if procs[r].exitcode is not None}
            # A rank that exited may still have its result in the queue's pipe: allow a grace
            # period before calling it lost (e.g. a crash, or a return value that won't pickle).
            dead_since = (dead_since or time.monotonic()) if dead else None
            if dead and time.monotonic() - dead_since > _DEAD_GRACE_S:
                raise RankFailure(f"ranks exited without a result (exit codes {dead})") from None
            continue
        if not ok:
            raise RankFailure(f"rank {rank} of {world_size} failed:\n{value}")
        values[rank] = _from_bytes(value)
    return [values[rank] for rank in range(world_size)]
