"""Honest timings: every phase a request reports (encode_s, each step behind denoise_s and the step
deadlines, decode_s) and every timed forward (Aco's decision, bench sp, calibration) ends with a
wait for the rank's own device, and no wait happens inside a step.

A CPU runs ops synchronously, so the waits do nothing here; what a CPU can show is where they are
called: pipedit.device_time.wait_for_device is replaced by a recorder, and the steps, rank calls
and transformer forwards write into the same log. That the wait really covers the device's work
is a GPU's to show (tests/gpu/test_device_time_gpu.py)."""

import pytest
import torch

from pipedit import device_time
from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.denoise import DenoiseJob
from pipedit.runtime.engine import Engine

RANK_CALLS = ("encode_prompt", "begin", "step", "time_forward", "finish")


@pytest.fixture
def log(monkeypatch):
    events: list[tuple] = []
    monkeypatch.setattr(device_time, "wait_for_device", lambda device, stream_only=False: events.append(
        ("wait", str(torch.device(device)))))
    step = DenoiseJob.step

    def logged_step(job, adapter):
        events.append(("job step", "start"))
        step(job, adapter)
        events.append(("job step", "end"))

    monkeypatch.setattr(DenoiseJob, "step", logged_step)
    return events


def _watch_worker(worker, events: list) -> None:
    """Logs each rank call's return and each transformer forward on this in-process rank."""
    for name in RANK_CALLS:
        method = getattr(worker, name)

        def logged(*args, _method=method, _name=name, **kwargs):
            result = _method(*args, **kwargs)
            events.append(("returns", _name))
            return result

        setattr(worker, name, logged)
    worker.adapter.transformer.register_forward_pre_hook(lambda *_: events.append(("forward", "start")))


def _steps(events: list) -> list[list[tuple]]:
    """The events logged inside each DenoiseJob.step."""
    inside, found = None, []
    for event in events:
        if event == ("job step", "start"):
            inside = []
        elif event == ("job step", "end"):
            found.append(inside)
            inside = None
        elif inside is not None:
            inside.append(event)
    return found


def test_each_phase_ends_with_a_wait_for_the_ranks_device_and_no_step_waits_inside(demo_checkpoint, log):
    request = VideoRequest("a red fox running through fresh snow", height=32, width=32, num_frames=5, steps=3)
    with Engine(EngineConfig(model=ModelConfig(path=str(demo_checkpoint), device="cpu"))) as engine:
        worker = engine.executor.worker
        _watch_worker(worker, log)
        result = engine.generate(request)
        worker.begin(request, worker.encode_prompt(request))
        worker.time_forward(False)  # Aco's measurement, bench sp and calibration time forwards so
    device = str(worker.device)
    returns = [i for i, event in enumerate(log) if event[0] == "returns" and event[1] != "begin"]
    assert [log[i][1] for i in returns] == ["encode_prompt", "step", "step", "step", "finish", "encode_prompt",
                                            "time_forward"]
    for i in returns:  # the call's last act before its caller reads the clock
        assert i > 0 and log[i - 1] == ("wait", device), f"{log[i][1]} returned without waiting for {device}: {log[:i + 1]}"
    steps = _steps(log)
    assert len(steps) == request.steps and all(("forward", "start") in inside for inside in steps)
    assert all(event[0] != "wait" for inside in steps for event in inside)  # never inside a step
    assert result.timings["denoise_s"] > 0


def test_timed_waits_before_starting_and_before_reading_the_clock(log):
    with device_time.timed(torch.device("cpu")) as watch:
        log.append(("work", ""))
    assert log == [("wait", "cpu"), ("work", ""), ("wait", "cpu")] and watch.seconds >= 0


def test_the_cpu_matmul_rate_says_what_it_measured():
    rate = device_time.measure_matmul_rate(torch.device("cpu"), repeats=2)
    assert rate.dtype == "float32" and rate.device == "cpu" and rate.flops_per_s > 0
    assert "float32 matmul rate on cpu" in rate.describe()
