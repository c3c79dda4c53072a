"""`pipedit bench cache` end to end on the OpenSoraPlan demo (its fastest model): the uncached
row is its own reference, fbcache:0 changes nothing (difference exactly 0, every step computed),
teacache is refused for a family without coefficients, and both reports are written."""

import json

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
