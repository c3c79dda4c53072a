"""pipedit dry-run with a step cache in the config: the agreement's all-reduce is recorded in the
SP group's collective sequence of every rank (they must match, as every collective's), and a
skipped Aco step (scripted decisions: compute, skip, ...) ends the helpers' forward in band."""

import json

from pipedit.cli import main


def test_dry_run_records_the_cache_agreement(tmp_path, capsys, demo_checkpoint):
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\nparallel:\n  ulysses: 2\n  decode_ranks: 1\n  aco: 'on'\n"
                      "generation:\n  height: 64\n  width: 64\n  num_frames: 9\n  cache: fbcache:0.1\n")
    code = main(["dry-run", "--config", str(config), "--model-path", str(demo_checkpoint), "--steps", "3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["mismatches"] == []
    sp = next(g for g in report["collectives"] if g.get("members") == [0, 1] and "calls" in g)
    reduces = [[c for c in sp["calls"][rank] if c.startswith("all_reduce")] for rank in ("0", "1")]
    assert reduces[0] == reduces[1] == ["all_reduce(float32[2])"] * 2  # steps 1 and 2 (step 0 has no reference)
    # Aco steps 0 and 2, each closed by the end header: step 0 computes (4 calls), step 2 skips after
    # block 0 (1 call, its end header sent at the skip and not again at the step's end).
    to_helper = next(g for g in report["collectives"] if g.get("members") == [0, 2] and "p2p_sends" in g)
    assert to_helper["p2p_sends"].count("int64[4]") == (4 + 1) + (1 + 1)
