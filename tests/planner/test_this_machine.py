"""The "this" profile: measured once and cached; scaled to a model's measured one-rank run."""

import json
from dataclasses import asdict

import pytest

from pipedit.planner import calibrate
from pipedit.planner.cost import Layout, Shape, decode_seconds, step_seconds
from pipedit.planner.hardware import GpuProfile, make_node
from pipedit.planner.models import from_checkpoint

FAKE = GpuProfile("this machine (2 CPU cores, measured)", peak_flops=4e10, mem_bandwidth=5e9, memory=16e9,
                  eff_matmul=1.0, eff_attention=0.4, eff_conv=0.1, eff_memory=1.0, launch_s=5e-6,
                  pcie_bandwidth=1e9, pcie_latency_s=1e-3, host_cores=2, calibrated=True,
                  crowded_bandwidth=2e8, crowded_latency_s=5e-3)


def test_the_cached_profile_is_used_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    (tmp_path / calibrate.CACHE_NAME).write_text(json.dumps({calibrate._key(): asdict(FAKE)}))
    monkeypatch.setattr(calibrate, "measure", lambda: pytest.fail("measured although cached"))
    assert calibrate.this_machine() == FAKE


def test_cpu_ranks_share_the_cores():
    one, two, four = (make_node(FAKE, n, "pcie").gpu.peak_flops for n in (1, 2, 4))
    assert one == two == FAKE.peak_flops and four == FAKE.peak_flops / 2
    # Collectives among more ranks than cores use the crowded measurement.
    assert make_node(FAKE, 2, "pcie").latency(2) == 1e-3 and make_node(FAKE, 3, "pcie").latency(3) == 5e-3


def test_scaled_profile_reproduces_the_measured_one_rank_request(demo_checkpoint):
    model, shape = from_checkpoint(demo_checkpoint), Shape(64, 64, 5)
    scaled = calibrate.scaled_to_model(FAKE, model, shape, steps=4, t_denoise=2.0, t_decode=0.5)
    one = make_node(scaled, 1, "pcie")
    assert 4 * step_seconds(model, shape, one, Layout()) == pytest.approx(2.0)
    assert decode_seconds(model, shape, one, tiled=False) == pytest.approx(0.5)
    assert scaled.pcie_bandwidth == FAKE.pcie_bandwidth  # communication stays as measured


def test_step_collectives_reproduce_the_measured_sp_step(demo_checkpoint):
    model, shape = from_checkpoint(demo_checkpoint), Shape(64, 64, 5)
    scaled = calibrate.scaled_to_model(FAKE, model, shape, steps=4, t_denoise=2.0, t_decode=0.5)
    two = make_node(scaled, 2, "pcie")
    loop_step = step_seconds(model, shape, two, Layout(ulysses=2))
    fitted = calibrate.with_step_collectives(scaled, model, shape, 2, loop_step + 0.2)
    # The solved latency reproduces the measured step and leaves compute and bandwidth alone.
    assert step_seconds(model, shape, make_node(fitted, 2, "pcie"), Layout(ulysses=2)) == pytest.approx(loop_step + 0.2)
    assert fitted.pcie_latency_s == fitted.crowded_latency_s > max(FAKE.pcie_latency_s, FAKE.crowded_latency_s)
    assert step_seconds(model, shape, make_node(fitted, 3, "pcie"), Layout(ulysses=3)) > \
        step_seconds(model, shape, make_node(scaled, 3, "pcie"), Layout(ulysses=3))
    assert (fitted.peak_flops, fitted.eff_matmul, fitted.pcie_bandwidth) == \
        (scaled.peak_flops, scaled.eff_matmul, scaled.pcie_bandwidth)
    # One rank has no collectives: its step is unchanged.
    one = Layout()
    assert step_seconds(model, shape, make_node(fitted, 1, "pcie"), one) == \
        pytest.approx(step_seconds(model, shape, make_node(scaled, 1, "pcie"), one))
    # A step measured faster than the tight all-to-all loop never lowers the loop's latency.
    floor = calibrate.with_step_collectives(scaled, model, shape, 2, 0.0)
    assert (floor.pcie_latency_s, floor.crowded_latency_s) == (FAKE.pcie_latency_s, FAKE.crowded_latency_s)


def test_sp_step_measurement_is_cached(tmp_path, monkeypatch, demo_checkpoint):
    from pipedit.config import EngineConfig, ModelConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime import sp_calibration

    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(sp_calibration, "measure_sp_step", lambda *a: calls.append(a) or 0.05)
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint), device="cpu", dtype="float32"))
    request = VideoRequest("a fox", height=64, width=64, num_frames=5, steps=4)
    assert sp_calibration.sp_step_seconds(config, str(demo_checkpoint), request) == 0.05
    assert sp_calibration.sp_step_seconds(config, str(demo_checkpoint), request) == 0.05
    assert len(calls) == 1


@pytest.mark.slow
def test_sp_step_runs_on_two_ulysses_ranks(demo_checkpoint):
    from pipedit.config import EngineConfig, ModelConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime import sp_calibration

    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint), device="cpu", dtype="float32"))
    request = VideoRequest("a fox", height=64, width=64, num_frames=5, steps=2)
    seconds = sp_calibration.measure_sp_step(config, str(demo_checkpoint), request)
    assert 0 < seconds < 60
