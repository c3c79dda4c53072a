"""/healthz answered on the head node: a one-replica Serve application of its own, routed at
/healthz (Serve's proxies match the longest route prefix; the API's app keeps "/").

Why: Serve's proxy hands every request to a replica. When a worker node dies, a request in flight
on its replica is answered 500, and the next ones wait, up to 2 s as measured, until Serve's router
learns that replica is gone. A probe must not travel there. The front lives on the head node
(Ray's `node:__internal_head__` resource, which only the head has and which lives as long as the
cluster), so the proxy always reaches it; the front asks a replica through a deployment handle,
with a deadline, and past the deadline answers from Serve's own count of running replicas (read
in the background, at most COUNT_EVERY_S old).

The answer (http/app.py's health_reply): a replica's own health (ok | degraded | down, with its reason);
degraded when fewer replicas run than serve.num_replicas, or when no replica answered in time
while some run; down (503) when none runs.
"""

from __future__ import annotations

import asyncio
import time

from ray import serve

from pipedit.compat import replica_grpc_on_loopback
from pipedit.config import EngineConfig

from . import stopping
from .deployment import APP_NAME, DEPLOYMENT_NAME
from .deployment import running_replicas as reported_running

HEALTH_APP = "pipedit-health"
HEALTH_ROUTE = "/healthz"
REPLICA_DEADLINE_S = 0.5  # a replica's answer; then the front answers from Serve's count, within a second
COUNT_EVERY_S = 1.0  # how stale the replica count may be
HEAD_NODE = {"node:__internal_head__": 0.001}  # a fraction of the head's own marker: only there


def front_answer(replica: tuple[str, str | None] | None, running: int | None,
                 wanted: int) -> tuple[str, str | None]:
    """The front's (status, reason). `replica`: what a replica answered (None: none in time);
    `running`: replicas Serve reports running (None: Serve could not say); `wanted`:
    serve.num_replicas."""
    fewer = running is not None and running < wanted
    count = f"{running} of {wanted} replicas running; Serve starts the others where there is room"
    if replica is None:
        if running == 0:
            return "down", f"no replica is running ({count})"
        what = count if fewer else ("Serve cannot say how many run" if running is None else f"{running} running")
        return "degraded", f"no replica answered within {REPLICA_DEADLINE_S:g} s ({what})"
    status, reason = replica
    if status == "ok" and fewer:
        return "degraded", count
    return status, reason


@serve.ingress()
class HealthFront:
    def __init__(self, config: EngineConfig, run: str | None = None):
        from ..jobs.from_config import data_dir_for

        replica_grpc_on_loopback()
        self.config, self.run, self.folder = config, run, data_dir_for(config)
        self.replicas = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=APP_NAME)
        self.count = ReplicaCount(running_replicas)

    def __serve_build_asgi_app__(self):
        from ..http.app import guarded_app, health_reply
        from ..contract.schemas import ErrorBody
        from ..jobs.from_config import limits_for

        serve_config = self.config.serve
        app = guarded_app(limits_for(self.config), serve_config.host, serve_config.allowed_hosts)

        @app.get("", responses={503: {"model": ErrorBody}})  # the route prefix is the path: /healthz
        async def healthz():
            return health_reply(*await self.answer())

        return app

    async def answer(self) -> tuple[str, str | None]:
        run = getattr(self, "run", None)
        if run is not None and stopping.announced(self.folder, run):  # step 1 of the stop (stopping.py)
            return "down", "the server is stopping (SIGTERM or Ctrl-C)"
        deadline = time.monotonic() + REPLICA_DEADLINE_S
        replica = None
        for _ in range(2):  # once more if the first replica asked is gone (its node died)
            response = self.replicas.health.remote()
            try:
                replica = await asyncio.wait_for(response, max(0.0, deadline - time.monotonic()))
                break
            except asyncio.TimeoutError:
                response.cancel()
                break
            except Exception:  # noqa: BLE001 - the replica died or is stopping: ask another
                continue
        return front_answer(replica, await self.count.now(), self.config.serve.num_replicas)


class ReplicaCount:
    """Serve's count of running replicas, read again every COUNT_EVERY_S in the background, so a
    probe never waits for Serve's controller (a read takes tens of ms, more on a busy head)."""

    def __init__(self, read):
        self.read, self.running, self.reader = read, None, None

    async def now(self) -> int | None:
        if self.reader is None:  # the first probe waits for a count: never "cannot say" at start
            self.running = await asyncio.to_thread(self.read)
            self.reader = asyncio.get_running_loop().create_task(self._keep_reading())
        return self.running

    async def _keep_reading(self) -> None:
        while True:
            await asyncio.sleep(COUNT_EVERY_S)
            self.running = await asyncio.to_thread(self.read)


def running_replicas() -> int | None:
    """The API's replicas Serve reports running; None while it cannot say."""
    try:
        return reported_running()
    except Exception:  # noqa: BLE001 - the controller restarting
        return None


def build_health_front(config: EngineConfig, run: str | None = None):
    return serve.deployment(HealthFront, name="HealthFront", num_replicas=1, max_ongoing_requests=64,
                            ray_actor_options={"num_cpus": 0, "resources": HEAD_NODE}).bind(config, run)
