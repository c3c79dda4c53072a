"""`pipedit serve` starts, or says why not, on any machine: a local Ray sized for the config, a
placement that cannot fit refused within seconds, --port against a running Serve, Ctrl-C during
start-up, and a killed rank recovered while /healthz keeps answering (the 3-rank demo config on
this 2-core machine: its replica asks for 4 CPU bundles)."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pipedit.distributed.spawn import free_tcp_port
from pipedit.errors import UserInputError
from pipedit.serve import launch
from pipedit.serve.placement import NodeCapacity, check_placement

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_placement_fits_per_node_and_names_what_is_missing():
    two_cores = [NodeCapacity("10.0.0.1", cpus=2, gpus=0)]
    check_placement((2, 0), 1, two_cores)
    with pytest.raises(UserInputError, match=r"needs 4 CPU\(s\) on one node.*10\.0\.0\.1: 2 CPU\(s\), 0 GPU\(s\)"):
        check_placement((4, 0), 1, two_cores)
    four_gpus = [NodeCapacity("a", cpus=64, gpus=4)]
    with pytest.raises(UserInputError, match=r"9 CPU\(s\) and 8 GPU\(s\)"):
        check_placement((9, 8), 1, four_gpus)
    two_nodes = [NodeCapacity("a", cpus=8, gpus=4), NodeCapacity("b", cpus=8, gpus=4)]
    check_placement((5, 4), 2, two_nodes)  # one replica per node (STRICT_PACK within a replica)
    with pytest.raises(UserInputError, match="each of its 3 replica"):
        check_placement((5, 4), 3, two_nodes)


def test_a_port_that_a_running_serve_cannot_take_is_refused_or_followed():
    with pytest.raises(UserInputError, match="Serve already runs on this Ray cluster with HTTP port 8000"):
        launch._serve_port(9000, port_given=True, running=8000)
    assert launch._serve_port(9000, port_given=False, running=8000) == 8000  # the config's default: follow Serve
    assert launch._serve_port(8000, port_given=True, running=8000) == 8000
    assert launch._serve_port(9000, port_given=True, running=None) == 9000


def _serve(config: Path, tmp_path: Path, port: int, **env) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipedit.cli", "serve", "--config", str(config), "--port", str(port),
               "--data-dir", str(tmp_path / "data")]
    environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**environment, **env})


def _get(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _wait_serving(process: subprocess.Popen, limit_s: float = 240) -> list[str]:
    lines, deadline = [], time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line or process.poll() is None, "the server exited:\n" + "".join(lines)
        lines.append(line)
        if "pipedit: serving http" in line:
            return lines
    raise AssertionError("the server did not start:\n" + "".join(lines))


def _stop(process: subprocess.Popen) -> float:
    start = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    return time.monotonic() - start


@pytest.mark.slow
def test_a_placement_that_cannot_fit_fails_within_seconds(tmp_path):
    config = tmp_path / "two-gpus.yaml"
    config.write_text("model: {device: cuda}\nparallel: {ulysses: 2}\n")
    start = time.monotonic()
    process = _serve(config, tmp_path, free_tcp_port())
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 2, out
    assert "needs 3 CPU(s) and 2 GPU(s) on one node" in out and "0 GPU(s)" in out
    assert time.monotonic() - start < 60, out  # Ray's own start included


@pytest.mark.slow
def test_ctrl_c_during_start_up_stops_within_seconds(tmp_path):
    process = _serve(CONFIGS / "demo-cpu-3ranks.yaml", tmp_path, free_tcp_port())
    while "deploying" not in (line := process.stdout.readline()):
        assert line, "the server exited before deploying"
    time.sleep(2)  # the replica and its ranks are starting
    assert _stop(process) < 20


@pytest.mark.slow
def test_three_ranks_on_two_cores_start_and_survive_a_killed_rank(tmp_path):
    port = free_tcp_port()
    process = _serve(CONFIGS / "demo-cpu-3ranks.yaml", tmp_path, port, PIPEDIT_FAULTS="kill:rank=1:step=2:once")
    try:
        _wait_serving(process)
        url = f"http://127.0.0.1:{port}"
        body = json.dumps({"prompt": "a fox", "size": "64x64", "num_frames": 5, "num_inference_steps": 4}).encode()
        request = urllib.request.Request(f"{url}/v1/videos", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            video_id = json.loads(response.read())["id"]
        degraded, slowest, deadline = False, 0.0, time.monotonic() + 180
        while (video := _get(f"{url}/v1/videos/{video_id}"))["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, video
            start = time.perf_counter()
            health = _get(f"{url}/healthz", timeout=1.0)  # a second at most, rebuild or not
            slowest = max(slowest, time.perf_counter() - start)
            degraded |= health["status"] == "degraded"
            time.sleep(0.3)
        assert video["status"] == "completed", video
        assert degraded, "the killed rank's group was not rebuilt"
        assert slowest < 1.0
    finally:
        assert _stop(process) < 20
