"""A server killed with SIGKILL mid-job loses nothing: after a restart on the same data folder the
finished video is still served and the interrupted and queued jobs complete."""

import os
import signal
import subprocess
import sys
import time

import pytest

from pipedit.distributed.spawn import free_tcp_port
from serve_helpers import SMALL, call, wait_status

_SERVER = """
import sys, uvicorn
from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.from_config import open_service
config = EngineConfig(model=ModelConfig(path=sys.argv[1]), generation=GenerationDefaults(height=64, width=64, num_frames=5, steps=2))
service = open_service(config, sys.argv[2], model_name="hunyuan-demo")
uvicorn.run(build_app(service), host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
"""


def _start(checkpoint, data_dir, port):
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(checkpoint), str(data_dir), str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if call("GET", f"{url}/healthz").status == 200:
                return server, url
        except OSError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.3)


@pytest.mark.slow
def test_kill_9_and_restart_loses_no_job(demo_checkpoint, tmp_path):
    port = free_tcp_port()
    server, url = _start(demo_checkpoint, tmp_path, port)
    try:
        finished = call("POST", f"{url}/v1/videos", {"prompt": "finished before the kill", **SMALL}).json()["id"]
        wait_status(url, finished)
        long = dict(SMALL, num_inference_steps=60)
        running = call("POST", f"{url}/v1/videos", {"prompt": "running at the kill", **long}).json()["id"]
        queued = call("POST", f"{url}/v1/videos", {"prompt": "queued at the kill", **SMALL}).json()["id"]
        wait_status(url, running, statuses=("in_progress",))
    finally:
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
    server, url = _start(demo_checkpoint, tmp_path, port)
    try:
        assert call("GET", f"{url}/v1/videos/{finished}/content").status == 200
        for video_id in (running, queued):
            assert wait_status(url, video_id, timeout=180)["progress"] == 100
    finally:
        server.terminate()
        server.wait(timeout=30)
