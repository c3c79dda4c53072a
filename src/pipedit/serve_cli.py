"""`pipedit serve`: the /v1/videos API on Ray Serve, until Ctrl-C."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request

HEALTH_TIMEOUT_S = 600  # loading a large model onto every rank takes minutes


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve the /v1/videos API (Ray Serve) until Ctrl-C")
    p.add_argument("--config", help="YAML config; its serve section sets the defaults below")
    p.add_argument("--model-path", help="checkpoint folder (default: the config's, else the demo model)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--data-dir", help="where jobs.sqlite and the videos live (default: <pipedit cache>/serve)")
    p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else a local Ray instance)")
    p.add_argument("--max-queued", type=int, help="queued jobs beyond this are refused with 429")
    p.add_argument("--database-url", help="job store URL, e.g. postgresql+psycopg://user@host/db "
                                          "(default: SQLite in the data folder)")
    p.add_argument("--num-replicas", type=int, help="Serve replicas (rank groups) sharing the job store")
    p.add_argument("--api-key", action="append", dest="api_keys", help="accepted Bearer key (repeatable)")
    p.add_argument("--demo-prompt", help="once healthy, render this prompt through the API and print the mp4's path")
    p.set_defaults(run=_run_serve)


def _config(args):
    from .config import EngineConfig, load_config

    config = load_config(args.config) if args.config else EngineConfig()
    config = config.with_overrides("model", path=args.model_path)
    return config.with_overrides(
        "serve", host=args.host, port=args.port, data_dir=args.data_dir, max_queued=args.max_queued,
        database_url=args.database_url, num_replicas=args.num_replicas,
        api_keys=tuple(args.api_keys) if args.api_keys else None,
    )


def _run_serve(args) -> int:
    import os

    import ray
    from ray import serve

    from pipedit.serve.deployment import APP_NAME, build_application

    config = _config(args)
    ray.init(address=args.address or os.environ.get("RAY_ADDRESS"), include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    try:
        serve.start(http_options={"host": config.serve.host, "port": config.serve.port})
        serve.run(build_application(config), name=APP_NAME, route_prefix="/", blocking=False)
        url = f"http://{_display_host(config.serve.host)}:{config.serve.port}"
        _wait_healthy(url)
        print(f"pipedit: serving {url} (OpenAPI at {url}/docs); Ctrl-C stops", flush=True)
        if args.demo_prompt:
            from pipedit.serve.service import data_dir_for

            print(_render(url, args.demo_prompt, config.serve.api_keys, data_dir_for(config)), flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("pipedit: stopping", file=sys.stderr)
        return 0
    finally:
        serve.shutdown()
        ray.shutdown()


def _display_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server at {url} did not become healthy within {HEALTH_TIMEOUT_S} s")


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
