"""The rates the benches print beside their times (pipedit.bench.rates): the cost model's FLOPs
over the reported seconds, per denoise rank, against the matmul rate measured on a rank's device.
Each bench's own test checks the figures of its real run (bench sp and pipeline:
tests/runtime/test_bench_sp.py; latency: test_bench_latency.py; cache: tests/cache); these check
the parts that need no run, by hand."""

from types import SimpleNamespace

import pytest

from pipedit.bench.lora import LoraBenchSettings, _row
from pipedit.bench.pipeline import ModeFigures, rate_lines
from pipedit.bench.rates import COLUMNS, StepRates, markdown_cells, rank_matmul_rate, step_flops
from pipedit.config import EngineConfig, ModelConfig
from pipedit.device_time import MatmulRate
from pipedit.planner.cost import block_work
from pipedit.planner.models import full_size
from pipedit.request import VideoRequest
from pipedit.runtime.layout import WorldLayout
from pipedit.runtime.rank import RankWorker

MATMUL = MatmulRate(1e12, "cuda:0", "bfloat16", 8192, rank=0)  # 1 TFLOP/s: figures read off directly
FAST = MatmulRate(1e16, "cuda:0", "bfloat16", 8192, rank=0)  # above what a released model's step reaches here


def test_a_rank_measures_its_own_devices_matmul_rate():
    worker = RankWorker(EngineConfig(model=ModelConfig(device="cpu")), WorldLayout())
    executor = SimpleNamespace(call_rank=lambda rank, method: getattr(worker, method)())  # as an executor calls it
    rate = rank_matmul_rate(executor)
    assert (rate.device, rate.dtype, rate.rank) == ("cpu", "float32", 0) and rate.flops_per_s > 0
    assert "float32 matmul rate on cpu (rank 0)" in rate.describe()


def test_a_steps_flops_are_the_cost_models_blocks_times_the_branches():
    spec = full_size("wan-14b")  # cross-attention, no sparse layers: every block counts whole
    tokens = spec.video_tokens(480, 832, 81)
    assert step_flops(spec, 480, 832, 81, 2) == pytest.approx(2 * spec.layers * block_work(spec, tokens).flops)


def test_figures_are_flops_over_seconds_per_device():
    rates = StepRates(full_size("wan-14b"), MATMUL)
    assert rates.figures(2e12, 2.0, 2) == {"flops": 2e12, "seconds": 2.0, "devices": 2, "tflops": 0.5,
                                            "of_matmul": 0.5}
    assert rates.columns(2e12, 2.0, 2).split() == ["0.5", "50%"] and COLUMNS.split() == ["TFLOP/s", "of", "mm"]
    assert markdown_cells(rates.figures(2e12, 2.0, 2)) == "0.5 | 50%"
    # 4 TFLOP/s per device against a 1 TFLOP/s matmul: the time missed device work.
    assert "measurement_error" in rates.figures(8e12, 1.0, 2) and "MEAS.ERROR" in rates.columns(8e12, 1.0, 2)
    assert rates.figures(1.0, None, 1) is None and markdown_cells(None) == "- | -"
    assert "bfloat16 matmul rate on cuda:0 (rank 0)" in rates.header()
    assert "CPU's float32" in StepRates(None, MatmulRate(1e9, "cpu", "float32", 1024)).header()


def test_a_lora_rows_rate_is_the_base_steps_flops_over_its_seconds_without_the_switch():
    spec = full_size("wan-14b")
    settings = LoraBenchSettings(height=480, width=832, num_frames=81, steps=4, repeats=1, rank=32)
    results = [SimpleNamespace(timings={"denoise_s": 1.0, "lora_switch_s": 0.2, "cfg_branches": 2.0})]
    row = _row("1 unfused", results, settings, StepRates(spec, FAST), devices=8)
    flops = step_flops(spec, 480, 832, 81, 2)
    assert row["step_s"] == pytest.approx(0.2) and row["flops_per_step"] == flops
    assert row["achieved"]["tflops"] == pytest.approx(flops / 0.2 / 8 / 1e12)


def test_pipeline_rate_lines_give_each_modes_request_flops_over_its_mean_denoise_seconds():
    spec = full_size("wan-14b")
    template = VideoRequest("p", height=480, width=832, num_frames=81, steps=3)
    mode = ModeFigures("dedivae", 10.0, [5.0], [6.0], [1.0], 0, 0, steps_s=[4.0, 6.0], branches=[2.0, 2.0])
    lines = rate_lines(StepRates(spec, FAST), template, [mode], devices=2)
    fields = lines[-1].split()
    flops = 3 * step_flops(spec, 480, 832, 81, 2)
    assert fields[0] == "dedivae" and float(fields[1]) == pytest.approx(flops / 1e12, rel=1e-3)
    assert float(fields[2]) == 5.0  # the mean of the requests' denoise_s
    assert float(fields[3]) == pytest.approx(flops / 5.0 / 2 / 1e12, rel=1e-2)
    assert lines[0].endswith("per denoise rank (2)")
