"""The Ray Serve application: one deployment whose replicas each own an engine (rank group).

A replica builds the EngineLoop (its rank actors go into the replica's own placement group:
bundle 0 is the replica, then one bundle per rank, STRICT_PACK, so Serve places whole rank
groups on one node; with parallel.nodes M, one bundle per node, STRICT_SPREAD), the job service
over the durable store, and the FastAPI app, which Serve serves as the ingress. `app_builder` lets
`serve run pipedit.serve.deployment:app_builder config=FILE` start the same application (that
public path is pipedit/serve/deployment.py's, which hands it on).

serve.num_replicas replicas (each its own placement group and rank group) share one job store
(serve.database_url: PostgreSQL across nodes) and one data folder: each claims queued jobs from
the store, and a replica that dies loses nothing (its lease lapses and another replica re-queues
and runs its job; see serve/jobs/store.py). A replica whose rank group cannot be rebuilt stops renewing
its leases and fails Serve's health check, so Serve replaces it.
"""

from __future__ import annotations

import os

from ray import serve

from pipedit import faults
from pipedit.compat import replica_grpc_on_loopback
from pipedit.config import EngineConfig, load_config
from pipedit.errors import UserInputError

from . import data_folder, stopping

APP_NAME = "pipedit"
DEPLOYMENT_NAME = "PipeditServer"
SHUTDOWN_MARGIN_S = 15.0  # a replica's shutdown beyond its grace period: closing the engine and the store


def engine_ranks(config: EngineConfig) -> int:
    parallel = config.parallel
    if parallel.ranks is not None:
        return parallel.ranks
    return parallel.denoise_ranks + (parallel.decode_ranks if isinstance(parallel.decode_ranks, int) else 0)


def replica_bundles(config: EngineConfig) -> list[dict]:
    """The resources of one replica, as placement-group bundles: a one-rank engine runs inside the
    replica (its GPU is the replica's); a multi-rank engine on one node has the replica's bundle,
    then one per rank actor (STRICT_PACK); over parallel.nodes M nodes, one bundle per node holding
    that node's ranks, the replica's CPU in the first (STRICT_SPREAD; pipedit.runtime.layout)."""
    gpu = 1 if config.model.device_type() == "cuda" else 0
    ranks, nodes = engine_ranks(config), config.parallel.nodes
    if ranks == 1:
        return [{"CPU": 1, "GPU": gpu}]
    if nodes > 1:
        check_node_split(config)  # refused here, before any replica starts
        per_node = ranks // nodes
        bundles = [{"CPU": per_node, "GPU": per_node} if gpu else {"CPU": per_node} for _ in range(nodes)]
        bundles[0] = dict(bundles[0], CPU=per_node + 1)
        return bundles
    return [{"CPU": 1}] + [{"CPU": 1, "GPU": 1} if gpu else {"CPU": 1}] * ranks


def check_node_split(config: EngineConfig) -> None:
    """The layout's own check of parallel.nodes (Ulysses inside a node, decode ranks on the last)."""
    from pipedit.runtime.layout import WorldLayout

    parallel = config.parallel
    if isinstance(parallel.decode_ranks, int):
        WorldLayout(ulysses=parallel.ulysses, ring=parallel.ring, decode=parallel.decode_ranks,
                    cfg=2 if parallel.cfg_parallel else 1, nodes=parallel.nodes)
    elif engine_ranks(config) % parallel.nodes:  # decode_ranks auto: its split is planned in the replica
        raise UserInputError(f"{engine_ranks(config)} ranks do not split evenly over {parallel.nodes} nodes")


def spreads(config: EngineConfig) -> bool:
    """Whether a replica's bundles go to different nodes (parallel.nodes > 1)."""
    return config.parallel.nodes > 1 and engine_ranks(config) > 1


def deployment_options(config: EngineConfig, data_mark: str | None = None) -> dict:
    """`data_mark`: the data folder's mark each replica checks at start (data_folder.py)."""
    # The fault injection switch goes from the server's environment to the replica (which hands
    # it to its rank actors), also on a cluster whose workers do not share that environment.
    handed = {faults.ENV: os.environ[faults.ENV]} if os.environ.get(faults.ENV) else {}
    if data_mark:
        handed[data_folder.ENV] = data_mark
    env = {"runtime_env": {"env_vars": handed}} if handed else {}
    bundles = replica_bundles(config)
    if len(bundles) == 1:
        return {"ray_actor_options": {"num_cpus": bundles[0]["CPU"], "num_gpus": bundles[0]["GPU"], **env}}
    return {
        "ray_actor_options": {"num_cpus": 1, **env},
        "placement_group_bundles": bundles,
        "placement_group_strategy": "STRICT_SPREAD" if spreads(config) else "STRICT_PACK",
    }


@serve.ingress()
class PipeditServer:
    def __init__(self, config: EngineConfig, run: str | None = None):
        """`run`: the id of this start of `pipedit serve` (stopping.py), None under `serve run`."""
        import ray

        from ..jobs.from_config import data_dir_for, limits_for, open_service
        from .metrics import EngineMetrics

        self.config = config
        replica_grpc_on_loopback()
        data_folder.check(data_dir_for(config), ray.util.get_node_ip_address())
        self.service = open_service(config, data_dir_for(config), model_name=config.serve.model_name,
                                    limits=limits_for(config), owner=_replica_owner(run))
        if run is not None:  # SIGTERM: take no new job as soon as `pipedit serve` says so
            closed = self.service.dispatcher.closing
            stopping.watch(data_dir_for(config), run, self.service.drain, closed.is_set)
        # The queue is the shared store's (the engine holds at most one waiting job per replica).
        self.service.engine.add_listener(EngineMetrics(lambda: self.service.store.count("queued"),
                                                       adapters_of=self.service.adapters_of))

    def __serve_build_asgi_app__(self):
        from ..http.app import build_app

        serve = self.config.serve
        return build_app(self.service, api_keys=serve.api_keys, admin_keys=serve.admin_keys, host=serve.host,
                         allowed_hosts=serve.allowed_hosts, docs=serve.docs)

    # Both health methods are coroutines: Serve runs a coroutine on the replica's event loop, but a
    # plain method in the thread pool that the app's sync routes use, where hundreds of event-stream
    # accepts (each a sync route and dependency reading the store) made the /healthz front's question
    # wait behind them. Their answers read flags and the disk's free space: nothing that blocks.
    async def health(self) -> tuple[str, str | None]:
        """This replica's (status, reason), for the /healthz front (health_front.py)."""
        return self.service.health()

    async def check_health(self):
        """Serve calls this every few seconds (health_check_period_s); after a few failures in a row
        it replaces the replica (a new one, with a new rank group, where there is room)."""
        reason = self.service.unfit()
        if reason is not None:
            raise RuntimeError(f"replica unfit: {reason}")

    def __del__(self):
        # Serve calls this when the app is deleted (pipedit serve stopping on SIGTERM or Ctrl-C):
        # running jobs may finish within serve.stop_grace_s; the rest go back to the store's queue.
        service = getattr(self, "service", None)
        if service is not None:
            service.shutdown(grace_s=self.config.serve.stop_grace_s)


def _replica_owner(run: str | None = None) -> str | None:
    """The replica's Serve id plus the job service's default (host, pid, tag), so operators see
    which replica runs a job; after the run's prefix, by which its stop hands the jobs back."""
    from ..jobs.service import new_owner_id

    try:
        replica = serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 - outside a replica (e.g. tests building the class directly)
        return None
    return f"{stopping.owner_prefix(run) if run else ''}{replica}@{new_owner_id()}"


def build_application(config: EngineConfig, data_mark: str | None = None, run: str | None = None):
    options = deployment_options(config, data_mark)
    # Serve kills a replica whose shutdown takes longer than graceful_shutdown_timeout_s: room for
    # the grace period, then closing the engine (its rank actors).
    return serve.deployment(PipeditServer, name=DEPLOYMENT_NAME, num_replicas=config.serve.num_replicas,
                            max_ongoing_requests=256, graceful_shutdown_timeout_s=config.serve.stop_grace_s + SHUTDOWN_MARGIN_S,
                            **options).bind(config, run)


def running_replicas() -> int:
    """The API's replicas Serve reports running (0 before the app exists); raises what Serve's
    controller raises while it cannot say."""
    app = serve.status().applications.get(APP_NAME)
    return 0 if app is None else app.deployments[DEPLOYMENT_NAME].replica_states.get("RUNNING", 0)


def app_builder(args: dict):
    """For `serve run pipedit.serve.deployment:app_builder config=configs/demo-cpu.yaml` (the API
    alone: its replicas answer /healthz themselves)."""
    config = load_config(args["config"]) if args.get("config") else EngineConfig()
    return build_application(config)
