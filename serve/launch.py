"""Starting the /v1/videos server for `pipedit serve`: Ray, Serve, the health wait, and the
optional demo request rendered through the API."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

from pipedit.config import EngineConfig

HEALTH_TIMEOUT_S = 600  # loading a large model onto every rank takes minutes


def serve_until_interrupted(config: EngineConfig, address: str | None, demo_prompt: str | None) -> int:
    """Serves `config` until Ctrl-C (exit code 0); `address` names a Ray cluster (default:
    RAY_ADDRESS, else a local Ray instance)."""
    import ray
    from ray import serve

    from .deployment import APP_NAME, build_application

    ray.init(address=address or os.environ.get("RAY_ADDRESS"), include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    try:
        serve.start(http_options={"host": config.serve.host, "port": config.serve.port})
        serve.run(build_application(config), name=APP_NAME, route_prefix="/", blocking=False)
        url = f"http://{_display_host(config.serve.host)}:{config.serve.port}"
        _wait_healthy(url)
        print(f"pipedit: serving {url} (OpenAPI at {url}/docs); Ctrl-C stops", flush=True)
        if demo_prompt:
            from .service import data_dir_for

            print(_render(url, demo_prompt, config.serve.api_keys, data_dir_for(config)), flush=True)
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
