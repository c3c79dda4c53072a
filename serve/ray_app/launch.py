"""Starting the /v1/videos server for `pipedit serve`: Ray, Serve, the health wait, and the
optional demo request rendered through the API; and stopping it on SIGTERM (systemd, Docker,
Kubernetes) as on Ctrl-C, in the bounded order of stopping.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

from pipedit.config import EngineConfig
from pipedit.errors import UserInputError
from pipedit.hub import cluster_fetch_plan

from . import data_folder, stopping
from .deployment import engine_ranks, replica_bundles, spreads
from .placement import NodeCapacity, check_placement, cluster_nodes, replica_demand

HEALTH_TIMEOUT_S = 600  # loading a large model onto every rank takes minutes
PROGRESS_S = 15.0  # how often a start that takes long says what Serve reports
STOP_TIMEOUT_S = 15.0  # Serve's own stop, on a cluster this process did not start
HAND_BACK_MARGIN_S = 5.0  # handing the jobs back, beyond serve.stop_grace_s (a store waiting for its lock)
FAILED = ("DEPLOY_FAILED", "UNHEALTHY")  # Serve's application states that end a start


class Stop(KeyboardInterrupt):
    """SIGTERM or Ctrl-C (SIGINT) arrived: the server stops. A KeyboardInterrupt, so not an
    Exception: Ray's code that catches Exception (a status read) must not swallow it. Hazard: a
    handler that raises in Ray's blocking calls (ray.get, which serve.start makes) is caught by
    Ray's signal check, which lets only a KeyboardInterrupt through, as a new KeyboardInterrupt
    (anything else becomes a SystemError): catch KeyboardInterrupt and read the signal from
    `received`."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _stop_on_signals(received: list[Stop]) -> None:
    """SIGTERM and SIGINT raise Stop in the main thread (appended to `received` first); once one
    came, further ones are ignored (the stop is under way and bounded in time). Installed before
    Ray starts and again after: Ray's start installs a handler of its own that dumps a stack and
    aborts."""
    def stop(signum, _frame):
        for each in (signal.SIGTERM, signal.SIGINT):
            signal.signal(each, signal.SIG_IGN)
        received.append(Stop(signum))
        raise received[-1]

    for each in (signal.SIGTERM, signal.SIGINT):
        signal.signal(each, stop)


def serve_until_interrupted(config: EngineConfig, address: str | None, demo_prompt: str | None,
                            port_given: bool = False) -> int:
    """Serves `config` until SIGTERM or Ctrl-C, then stops (see _stop) and exits 0 with one line
    saying so (also when a step of the stop failed: it says which). `address` names a Ray cluster (default: RAY_ADDRESS, else a new local Ray instance
    sized for the config). Fails within seconds, with what was asked and what the cluster has,
    when the replicas cannot be placed. `port_given`: the port was asked for explicitly (refused
    if Serve already listens elsewhere)."""
    from pipedit.runtime.ray_instance import stop_ray

    received: list[Stop] = []
    _stop_on_signals(received)
    owns_ray, connected, running_port, how, served, run = False, False, None, None, [], stopping.new_run()
    try:
        _check_own_instance(config, address)
        owns_ray = _connect_ray(config, address)
        connected = True
        _stop_on_signals(received)
        running_port = _running_serve_port()
        _serve(config, port_given, running_port, demo_prompt, served, run)
    except KeyboardInterrupt:  # a Stop, or Ray's KeyboardInterrupt for one (see Stop)
        if not received:
            raise
        how = received[0].how
    finally:
        # Interrupted while starting on an instance of our own: no replica has run a job; Ray's end
        # takes everything at once.
        # Not connected (Ray did not start or the cluster was not reached): nothing of ours to stop.
        if connected and (served or not owns_ray):
            _stop(config, run, stop_serve=running_port is None and not owns_ray, owns_ray=owns_ray)
        stop_ray(owns_ray)
    print(f"pipedit: stopped on {how}: {'Serve and Ray' if owns_ray else 'the app'} shut down; unfinished jobs "
          f"wait in the job store for the next start", flush=True)
    return 0


def _serve(config: EngineConfig, port_given: bool, running_port: int | None, demo_prompt: str | None,
           served: list, run: str) -> None:
    """Deploys the app, waits until it is healthy (then appends the URL to `served`), and serves
    until a Stop."""
    from ..jobs.from_config import data_dir_for

    nodes = cluster_nodes()
    check_placement(replica_demand(replica_bundles(config), spreads(config)), config.serve.num_replicas, nodes)
    fetch_plan = cluster_fetch_plan(config.model, len(nodes))
    if fetch_plan:
        print(f"pipedit: {fetch_plan}", flush=True)
    mark = data_folder.mark(data_dir_for(config))  # each replica checks it holds this mark
    port = _serve_port(config.serve.port, port_given, running_port)
    print(f"pipedit: deploying {config.serve.num_replicas} replica(s) of {engine_ranks(config)} rank(s) each "
          f"(loading the model; progress every {PROGRESS_S:.0f} s)", flush=True)
    start_serve(proxy_location=config.serve.proxy_location,
                http_options={"host": config.serve.host, "port": port,
                              "keep_alive_timeout_s": config.serve.keep_alive_timeout_s})
    run_applications(config, mark, run)
    url = f"http://{_display_host(config.serve.host)}:{port}"
    _wait_healthy(url)
    served.append(url)
    print(f"pipedit: serving {url} (OpenAPI at {url}/{'docs' if config.serve.docs else 'openapi.json'}); "
          f"Ctrl-C or SIGTERM stops", flush=True)
    if demo_prompt:
        print(_render(url, demo_prompt, config.serve.api_keys, data_dir_for(config)), flush=True)
    _watch_replicas(config.serve.num_replicas)


def start_serve(**options) -> None:
    """serve.start(**options), on a head slower than Serve expects too. serve.start waits for the
    HTTP proxies (60 s, Ray Serve's HTTP_PROXY_TIMEOUT) and raises TimeoutError while they go on
    starting, or ActorDiedError where Serve's controller killed a proxy that missed its own readiness
    check and starts another: both seen on a busy machine. A second call finds the controller running
    and returns; the health wait (`_wait_healthy`, or a caller's own) then tells when a proxy answers."""
    from ray import serve
    from ray.exceptions import ActorDiedError

    try:
        serve.start(**options)
    except (TimeoutError, ActorDiedError) as error:
        print(f"pipedit: {error} Waiting for the proxy with the replicas", file=sys.stderr, flush=True)
        serve.start(**options)


def run_applications(config: EngineConfig, data_mark: str | None = None, run: str | None = None) -> None:
    """Deploys the API (route "/") and its /healthz front (health_front.py), without waiting.
    `run`: this start's id, by which its stop reaches them (stopping.py)."""
    from ray import serve

    from .deployment import APP_NAME, build_application
    from .health_front import HEALTH_APP, HEALTH_ROUTE, build_health_front

    serve.run(build_application(config, data_mark, run), name=APP_NAME, route_prefix="/", blocking=False)
    serve.run(build_health_front(config, run), name=HEALTH_APP, route_prefix=HEALTH_ROUTE, blocking=False)


def _watch_replicas(wanted: int) -> None:
    """Until a Stop: says when fewer replicas than asked for run (their node was lost and Serve
    waits for room to start replacements) and when all run again."""
    said = wanted
    while True:
        time.sleep(PROGRESS_S)
        running = _running_replicas()
        line = replica_count_line(running, wanted) if running is not None and running != said else None
        if line:
            print(line, flush=True)
            said = running


def replica_count_line(running: int, wanted: int) -> str:
    if running < wanted:
        return (f"pipedit: serving with {running} of {wanted} replica(s); Serve starts the others where there is "
                f"room (a node that joins takes them)")
    return f"pipedit: all {wanted} replica(s) running again"


def _running_replicas() -> int | None:
    """Replicas Serve reports running; None while it cannot say."""
    from .deployment import running_replicas

    try:
        return running_replicas()
    except Exception:  # noqa: BLE001 - the controller restarting: ask again next time (a Stop is no Exception)
        return None


def _connect_ray(config: EngineConfig, address: str | None) -> bool:
    """Connects to the given cluster (else RAY_ADDRESS's), or starts an instance of its own (on
    loopback) with a logical CPU for every bundle of every replica (ranks share cores, as
    `generate`'s instance does) and the GPUs Ray detects; never another local instance (a test
    suite's, a killed one's): see pipedit.runtime.ray_instance. Returns whether this process owns
    the instance. An instance of our own that does not come up in time is tried twice (see there)."""
    from pipedit.runtime.ray_instance import START_TIMEOUT, connect_ray

    try:
        return connect_ray(address, num_cpus=_own_instance_cpus(config), log_to_driver=False)
    except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception for it
        if START_TIMEOUT not in str(error):
            raise
        raise UserInputError(f"Ray's node did not come up in time, twice ({error.args[0].split('.')[0]}), most likely "
                             f"because the machine is busy or an earlier server's Ray is still stopping: wait until "
                             f"the load drops or that Ray has exited, then start again") from None


def _own_instance_cpus(config: EngineConfig) -> int:
    cpus = sum(d[0] for d in replica_demand(replica_bundles(config)))
    return max(os.cpu_count() or 1, int(cpus) * config.serve.num_replicas)


def _check_own_instance(config: EngineConfig, address: str | None) -> None:
    """Where the server starts a Ray instance of its own, refuses replicas that cannot fit on it
    before Ray starts (which takes seconds, a minute on a busy machine): its one node has
    _own_instance_cpus and the GPUs torch sees, which Ray counts alike (CUDA_VISIBLE_DEVICES). On
    a cluster, _serve checks what the cluster has once connected."""
    import torch

    from pipedit.runtime.ray_instance import cluster_address

    if cluster_address(address) is not None:
        return
    this_machine = NodeCapacity("this machine (a Ray instance of its own)", _own_instance_cpus(config),
                                torch.cuda.device_count())
    check_placement(replica_demand(replica_bundles(config), spreads(config)), config.serve.num_replicas,
                    [this_machine])


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


def _stop(config: EngineConfig, run: str, *, stop_serve: bool, owns_ray: bool) -> None:
    """Stops what this process started, in stopping.py's order, each step bounded: /healthz 503 and
    no new claims at once; the running jobs handed back in the store within serve.stop_grace_s +
    HAND_BACK_MARGIN_S; then, on a cluster this process did not start, the apps (and Serve when
    `stop_serve`: we started it) within STOP_TIMEOUT_S. On an instance of our own there is nothing
    left to wait for: the caller ends Ray, which takes the replicas at once."""
    import ray

    from ..jobs.from_config import data_dir_for, store_for

    if not ray.is_initialized():
        return
    grace_s, folder = config.serve.stop_grace_s, data_dir_for(config)
    try:
        stopping.announce(folder, run)
    except OSError as error:  # the replicas stop claiming when Serve stops them instead
        print(f"pipedit: could not leave the stop file in {folder}: {error}", file=sys.stderr, flush=True)
    announced_at = time.monotonic()

    def hand_back():
        store = store_for(config, folder)
        try:
            stopping.hand_back(store, run, grace_s, announced_at)
        finally:
            store.close()

    try:
        _bounded(hand_back, grace_s + HAND_BACK_MARGIN_S, "handing the running jobs back to the store",
                 f"they run again once their leases lapse ({config.serve.job_lease_s:g} s)")
        if not owns_ray:
            _bounded(lambda: _delete_apps(stop_serve), STOP_TIMEOUT_S, "stopping the app",
                     "the cluster goes on stopping it")
    finally:
        with contextlib.suppress(OSError):
            stopping.withdraw(folder, run)


def _bounded(step, limit_s: float, what: str, otherwise: str) -> None:
    """Runs `step` for at most `limit_s` seconds (in a thread left behind past it); says what
    happens instead when it fails or takes longer."""
    failed = []

    def run():
        try:
            step()
        except Exception as error:  # noqa: BLE001 - the stop goes on
            failed.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive() or failed:
        why = f"failed ({failed[0]})" if failed else f"took more than {limit_s:.0f} s"
        print(f"pipedit: {what} {why}; {otherwise}", file=sys.stderr, flush=True)


def _delete_apps(stop_serve: bool) -> None:
    from ray import serve

    from .deployment import APP_NAME
    from .health_front import HEALTH_APP

    serve.delete(HEALTH_APP, _blocking=False)  # without waiting: the API's stop starts at once
    serve.delete(APP_NAME)
    if stop_serve:
        serve.shutdown()


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
        if status in FAILED:
            raise RuntimeError(f"the server did not start ({status}): {message}")
        if time.monotonic() >= next_report:
            print(f"pipedit: still starting ({status}){': ' + message if message else ''}", file=sys.stderr,
                  flush=True)
            next_report = time.monotonic() + PROGRESS_S
        time.sleep(0.5)
    raise RuntimeError(f"the server at {url} did not become healthy within {HEALTH_TIMEOUT_S} s")


def _app_status() -> tuple[str, str]:
    """(application status, the most telling message: the app's, else a deployment's): the API's,
    or the /healthz front's when that one failed."""
    from ray import serve

    from .deployment import APP_NAME
    from .health_front import HEALTH_APP

    try:
        applications = serve.status().applications
    except Exception:  # noqa: BLE001 - the controller is still starting
        return "STARTING", ""
    reports = []
    for app in (applications.get(HEALTH_APP), applications.get(APP_NAME)):
        if app is not None:
            messages = [app.message] + [d.message for d in app.deployments.values()]
            reports.append((str(getattr(app.status, "value", app.status)), next((m for m in messages if m), "")))
    failed = [report for report in reports if report[0] in FAILED]
    return (failed or reports[-1:] or [("STARTING", "")])[0]


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
