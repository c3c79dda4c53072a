"""`pipedit bench cache` end to end on the OpenSoraPlan demo (its fastest model): the uncached
row is its own reference, fbcache:0 changes nothing (difference exactly 0, every step computed),
teacache is refused for a family without coefficients, and both reports are written."""

import json

import pytest

from pipedit.cli import main


def test_bench_cache_reports_each_setting(osp_demo, tmp_path, capsys):
    code = main(["bench", "cache", "--models", "opensora-plan", "--model-path", str(osp_demo), "--caches",
                 "fbcache:0,teacache:0.1", "--height", "48", "--width", "48", "--num-frames", "5", "--steps", "3",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "say nothing about visual quality" in out
    rows = {row["cache"]: row for row in json.loads((tmp_path / "cache.json").read_text())["rows"]}
    assert (rows["none"]["computed"], rows["none"]["latents_rel_l2"]) == (3, 0.0)
    fb0 = rows["fbcache:0"]
    assert (fb0["computed"], fb0["skipped"], fb0["latents_rel_l2"]) == (3, 0, 0.0)
    assert "hunyuan-video" in rows["teacache:0.1"]["refused"]
    assert (tmp_path / "cache.md").read_text().count("| opensora-plan |") == 3
    # TFLOP/s: the cost model's FLOPs of the computed steps (2 forwards each: guidance 6 > 1) over
    # denoise_s, on one device, against the rate measured on the engine's rank 0.
    from pipedit.bench.rates import model_spec, step_flops

    report = json.loads((tmp_path / "cache.json").read_text())
    assert (report["matmul"]["rank"], report["matmul"]["device"]) == (0, "cpu") and "lower bound" in report["flops_counted"]
    step = step_flops(model_spec(osp_demo, "opensora-plan"), 48, 48, 5, 2)
    for row in (rows["none"], fb0):
        assert row["cfg_branches"] == 2 and row["flops"] == row["computed"] * step
        assert row["achieved"]["tflops"] == pytest.approx(row["flops"] / row["denoise_s"] / 1e12)
