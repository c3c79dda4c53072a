"""Starting the /v1/videos server for `pipedit serve`: Ray, Serve, the health wait, and the
optional demo request rendered through the API."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

from pipedit.config import EngineConfig
from pipedit.errors import UserInputError

from .deployment import engine_ranks, replica_bundles
from .placement import check_placement, cluster_nodes, replica_demand

HEALTH_TIMEOUT_S = 600  # loading a large model onto every rank takes minutes
PROGRESS_S = 15.0  # how often a start that takes long says what Serve reports
STOP_TIMEOUT_S = 15.0


def serve_until_interrupted(config: EngineConfig, address: str | None, demo_prompt: str | None,
                            port_given: bool = False) -> int:
    """Serves `config` until Ctrl-C (exit code 0). `address` names a Ray cluster (default:
    RAY_ADDRESS, else a new local Ray instance sized for the config). Fails within seconds, with
    what was asked and what the cluster has, when the replicas cannot be placed. `port_given`:
    the port was asked for explicitly (refused if Serve already listens elsewhere)."""
    import ray
    from ray import serve

    from .deployment import APP_NAME, build_application

    owns_ray = _connect_ray(config, address)
    running_port = _running_serve_port()
    try:
        check_placement(replica_demand(replica_bundles(config)), config.serve.num_replicas, cluster_nodes())
        port = _serve_port(config.serve.port, port_given, running_port)
        print(f"pipedit: deploying {config.serve.num_replicas} replica(s) of {engine_ranks(config)} rank(s) each "
              f"(loading the model; progress every {PROGRESS_S:.0f} s)", flush=True)
        serve.start(http_options={"host": config.serve.host, "port": port,
                                  "keep_alive_timeout_s": config.serve.keep_alive_timeout_s})
        serve.run(build_application(config), name=APP_NAME, route_prefix="/", blocking=False)
        url = f"http://{_display_host(config.serve.host)}:{port}"
        _wait_healthy(url)
        print(f"pipedit: serving {url} (OpenAPI at {url}/{'docs' if config.serve.docs else 'openapi.json'}); "
              f"Ctrl-C stops", flush=True)
        if demo_prompt:
            from .service import data_dir_for

            print(_render(url, demo_prompt, config.serve.api_keys, data_dir_for(config)), flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("pipedit: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        _stop(APP_NAME, owns_ray, serve_was_running=running_port is not None)
        if owns_ray:
            ray.shutdown()


def _connect_ray(config: EngineConfig, address: str | None) -> bool:
    """Connects to the given cluster, or starts a local instance with a logical CPU for every
    bundle of every replica (ranks share cores, as `generate`'s local instance does) and the GPUs
    Ray detects. "local" even when another local instance runs (a test suite's, say): attaching to
    it would serve from someone else's cluster. Returns whether this process owns the instance."""
    import ray

    options = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **options)
        return False
    cpus, _ = replica_demand(replica_bundles(config))
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, int(cpus) * config.serve.num_replicas), **options)
    return True


def _running_serve_port() -> int | None:
    """The HTTP port of a Serve instance already running on the cluster, None if there is none.
    Hazard: Ray has no public API for it; this reads the controller client's config (ray==2.60)."""
    from ray.serve.context import _get_global_client

    try:
        client = _get_global_client(raise_if_no_controller_running=False)
    except Exception:  # noqa: BLE001 - no controller reachable: no Serve running
        return None
    return None if client is None else int(client.http_config.port)


def _serve_port(wanted: int, port_given: bool, running: int | None) -> int:
    """The port the app will be on: Serve's HTTP port (`running`, None without Serve) cannot
    change while it runs."""
    if running is None or running == wanted:
        return wanted
    if port_given:
        raise UserInputError(f"Serve already runs on this Ray cluster with HTTP port {running}, and a running "
                             f"Serve cannot move to port {wanted}: leave out --port (the app is then served on "
                             f"{running}) or stop that Serve first (`serve shutdown`)")
    print(f"pipedit: Serve already runs on this cluster: serving on its port {running} (serve.port {wanted} "
          f"applies only where Serve starts)", file=sys.stderr, flush=True)
    return running


def _stop(app_name: str, owns_ray: bool, serve_was_running: bool) -> None:
    """Stops what this process started, in a bounded time: on a cluster of our own the instance's
    end stops everything (jobs stay in the store for the next start); on a shared one only our
    app goes, and a Serve that ran before us stays."""
    from ray import serve

    if owns_ray:
        return
    stop = (lambda: serve.delete(app_name)) if serve_was_running else serve.shutdown
    worker = threading.Thread(target=stop, daemon=True)
    worker.start()
    worker.join(STOP_TIMEOUT_S)
    if worker.is_alive():
        print(f"pipedit: the app did not stop within {STOP_TIMEOUT_S:.0f} s; the cluster goes on stopping it",
              file=sys.stderr, flush=True)


def _display_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _wait_healthy(url: str) -> None:
    """Until /healthz answers 200; says what Serve reports meanwhile, and fails at once when the
    deployment failed (e.g. a replica's engine could not start)."""
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    next_report = time.monotonic() + PROGRESS_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        status, message = _app_status()
        if status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"the server did not start ({status}): {message}")
        if time.monotonic() >= next_report:
            print(f"pipedit: still starting ({status}){': ' + message if message else ''}", file=sys.stderr,
                  flush=True)
            next_report = time.monotonic() + PROGRESS_S
        time.sleep(0.5)
    raise RuntimeError(f"the server at {url} did not become healthy within {HEALTH_TIMEOUT_S} s")


def _app_status() -> tuple[str, str]:
    """(application status, the most telling message: the app's, else a deployment's)."""
    from ray import serve

    from .deployment import APP_NAME

    try:
        app = serve.status().applications.get(APP_NAME)
    except Exception:  # noqa: BLE001 - the controller is still starting
        return "STARTING", ""
    if app is None:
        return "STARTING", ""
    messages = [app.message] + [d.message for d in app.deployments.values()]
    return str(getattr(app.status, "value", app.status)), next((m for m in messages if m), "")


def _call(method: str, url: str, keys, body: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if keys:
        headers["Authorization"] = f"Bearer {keys[0]}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _render(url: str, prompt: str, keys, data_dir) -> str:
    """Submits one prompt through the API, waits for it, and says where its mp4 is."""
    video = _call("POST", f"{url}/v1/videos", keys, {"prompt": prompt})
    while video["status"] in ("queued", "in_progress"):
        time.sleep(0.5)
        video = _call("GET", f"{url}/v1/videos/{video['id']}", keys)
    if video["status"] != "completed":
        return f"pipedit: the demo request ended {video['status']}: {video.get('error')}"
    path = (data_dir / "videos" / f"{video['id']}.mp4").resolve()
    return f"pipedit: demo video {path}\n  also at {url}/v1/videos/{video['id']}/content"
