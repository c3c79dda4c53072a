"""`pipedit plan --calibration FILE`: the planner takes the efficiencies a `bench kernels` run
measured, so its predictions follow the kernels. The rows here are what the h100 profile itself
predicts for one block, with the attention call made twice as slow: the calibrated prediction of
a one-GPU step must grow by exactly the attention term, and nothing else may move."""

import json
import pytest

from pipedit.cli import main
from pipedit.errors import UserInputError
from pipedit.planner.cost import Layout, Shape, StepWork, block_work, step_seconds, step_work
from pipedit.planner.hardware import make_node, profile
from pipedit.planner.kernel_calibration import FORMAT, calibrated, check_profile, read_calibration
from pipedit.planner.models import full_size

SHAPE = Shape(480, 832, 81)


def _row(model, prof, attention_slowdown: float) -> dict:
    """One block as `prof` predicts it, its attention call `attention_slowdown` times slower."""
    work = block_work(model, model.video_tokens(SHAPE.height, SHAPE.width, SHAPE.frames))
    attention_s = work.self_attention_flops / (prof.peak_flops * prof.eff_attention) * attention_slowdown
    rest_s = (work.linear_flops / (prof.peak_flops * prof.eff_matmul)
              + work.elementwise_bytes / (prof.mem_bandwidth * prof.eff_memory)
              + work.cross_attention_flops / (prof.peak_flops * prof.eff_attention * 1 / attention_slowdown)
              + StepWork.kernels_per_layer * prof.launch_s)
    return {"model": model.name, "shape": "832x480x81", "linear_flops": work.linear_flops,
            "self_attention_flops": work.self_attention_flops, "cross_attention_flops": work.cross_attention_flops,
            "elementwise_bytes": work.elementwise_bytes, "block_s": attention_s + rest_s, "attention_s": attention_s}


def _write(path, rows, gpu_name="NVIDIA H100 80GB HBM3"):
    path.write_text(json.dumps({"format": FORMAT, "gpu_name": gpu_name, "kernel": "sdpa", "precision": "bfloat16",
                                "rows": rows}))
    return path


def test_a_calibration_changes_the_prediction_by_the_measured_ratio(tmp_path):
    model, prof = full_size("wan-14b"), profile("h100")
    one_gpu = make_node(prof, 1, "nvlink")
    as_profiled = read_calibration(_write(tmp_path / "same.json", [_row(model, prof, 1.0)]))
    assert calibrated(prof, as_profiled).eff_attention == pytest.approx(prof.eff_attention)
    assert calibrated(prof, as_profiled).eff_matmul == pytest.approx(prof.eff_matmul)

    slow = calibrated(prof, read_calibration(_write(tmp_path / "slow.json", [_row(model, prof, 2.0)])))
    assert slow.eff_attention == pytest.approx(prof.eff_attention / 2)
    assert slow.eff_matmul == pytest.approx(prof.eff_matmul)
    before = step_seconds(model, SHAPE, one_gpu, Layout())
    after = step_seconds(model, SHAPE, make_node(slow, 1, "nvlink"), Layout())
    attention_term = step_work(model, SHAPE).attention_flops / (prof.peak_flops * prof.eff_attention)
    assert after - before == pytest.approx(attention_term, rel=1e-9)


def test_plan_prints_the_calibrated_profile(tmp_path, capsys):
    model, prof = full_size("wan-14b"), profile("h100")
    path = _write(tmp_path / "slow.json", [_row(model, prof, 2.0)])
    args = ["plan", "--model", "wan-14b", "--gpus", "1", "--height", "480", "--width", "832", "--frames", "81",
            "--steps", "1", "--prompts", "1", "--top", "1"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main([*args, "--calibration", str(path)]) == 0
    out = capsys.readouterr().out
    assert "calibrated: sdpa attention, bfloat16, measured on NVIDIA H100 80GB HBM3" in out and out != plain


def test_a_calibration_applies_to_its_own_gpu_only(tmp_path):
    rows = [_row(full_size("wan-1.3b"), profile("h100"), 1.0)]
    h100 = read_calibration(_write(tmp_path / "h100.json", rows))
    check_profile(h100, "h100")
    with pytest.raises(UserInputError, match="cannot calibrate --gpu h200: plan with --gpu h100"):
        check_profile(h100, "h200")
    with pytest.raises(UserInputError, match="cannot calibrate --gpu h100"):
        check_profile(read_calibration(_write(tmp_path / "cpu.json", rows, gpu_name=None)), "h100")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": FORMAT, "rows": [replace_row(rows[0], attention_s=0)]}))
    with pytest.raises(UserInputError, match="block_s > attention_s > 0"):
        read_calibration(bad)
    with pytest.raises(UserInputError, match="not a kernel calibration"):
        read_calibration(_write_plain(tmp_path / "other.json"))


def replace_row(row: dict, **changes) -> dict:
    return {**row, **changes}


def _write_plain(path):
    path.write_text("{}")
    return path

