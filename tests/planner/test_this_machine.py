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
