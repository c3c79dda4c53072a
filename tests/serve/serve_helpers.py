"""Serving test helpers: the real engine loop on the demo model, a JobService on a data folder, and
the app served by uvicorn on a free local port in a background thread."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.adapter import shape_validator
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobStore

MODEL = "hunyuan-demo"
HEADER_TIMEOUT_S = 2.0  # serve.header_timeout_s of every test server (the protocol Serve's proxy gets)
SMALL = {"size": "64x64", "num_frames": 5, "num_inference_steps": 2}
# The jobs table of a store from before job ownership (no owner, lease_until, attempt, client).
PRE_OWNERSHIP_JOBS_TABLE = ("CREATE TABLE jobs (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL, "
                            "progress INTEGER NOT NULL, created_at FLOAT NOT NULL, completed_at FLOAT, "
                            "params JSON NOT NULL, extras JSON NOT NULL, error JSON, video_file VARCHAR(255))")


@dataclass
class Running:
    engine: EngineLoop
    service: JobService
    url: str
    stop: callable

    def close(self) -> None:
        self.stop()
        self.service.close()
        self.engine.close()
        self.service.store.close()


def start(checkpoint: Path, data_dir: Path, limits: ServiceLimits = ServiceLimits(), api_keys=(),
          recover: bool = False) -> Running:
    engine = EngineLoop.from_config(EngineConfig(model=ModelConfig(path=str(checkpoint))))
    defaults = GenerationDefaults(height=64, width=64, num_frames=5, steps=2)
    service = JobService(engine, JobStore.in_folder(data_dir), data_dir, MODEL, defaults, limits,
                         validate=shape_validator(str(checkpoint)))
    if recover:
        service.recover()
    url, stop = serve_in_thread(build_app(service, api_keys))
    return Running(engine, service, url, stop)


@pytest.fixture(scope="module")
def server(demo_checkpoint, tmp_path_factory):
    """A running service (engine, store, HTTP) for the tests of one module; conftests import it."""
    running = start(demo_checkpoint, tmp_path_factory.mktemp("data"))
    yield running
    running.close()


def serve_in_thread(app, http=None) -> tuple[str, callable]:
    """`app` on uvicorn in a thread, with `http` as its protocol (default: pipedit's, as every test server)."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    from pipedit.serve.http.header_timeout import protocol_class

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           http=http or protocol_class(HEADER_TIMEOUT_S)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=20)

    def stop():
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{port}", stop


def wait_for(condition, timeout=60.0, every=0.05):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body)


def call(method: str, url: str, body: dict | None = None, headers: dict | None = None,
         data: bytes | None = None) -> Reply:
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, dict(error.headers), error.read())


def call_until_stored(method: str, url: str, body: dict | None = None, attempts: int = 10) -> Reply:
    """`call`, again after the Retry-After pause while the job store is busy (503 server_busy: another
    writer held its lock past the request's wait, and nothing was changed), as a client should; a
    busy machine's PostgreSQL made a first try miss. Any other answer is returned as it came."""
    for _ in range(attempts - 1):
        reply = call(method, url, body)
        if reply.status != 503 or reply.json().get("error", {}).get("code") != "server_busy":
            return reply
        time.sleep(float(next((v for k, v in reply.headers.items() if k.lower() == "retry-after"), "1")))
    return call(method, url, body)


def wait_status(url: str, video_id: str, statuses=("completed",), timeout=90.0) -> dict:
    seen = {}

    def reached():
        seen.update(call("GET", f"{url}/v1/videos/{video_id}").json())
        return seen["status"] in statuses

    wait_for(reached, timeout=timeout, every=0.1)
    return seen


class IdleEngine:
    """The engine loop's interface, running nothing: jobs it is given stay in its queue (for
    tests of the HTTP layer and admission, where no video need be made)."""

    accepting = True

    def __init__(self):
        self.submitted = []

    @property
    def queue_length(self):
        return len(self.submitted)

    def add_listener(self, listener):
        return lambda: None

    def submit(self, request):
        self.submitted.append(request.request_id)
        return request.request_id

    def cancel(self, request_id):
        return request_id in self.submitted

    def wait(self, request_id, timeout=None):
        raise TimeoutError(request_id)

    def close(self):
        self.accepting = False
