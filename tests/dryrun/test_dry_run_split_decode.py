"""The dry run covers one video decoded by the whole decode group: rank 0 hands the latents to the
lead decode rank, which broadcasts them in the decode group; the other decode rank sends its
pieces back; every collective matches across the decode ranks and each rank's peak during the
split is reported. With split_decode off there is no decode group and no split."""

import json

from pipedit.cli import main


def _report(tmp_path, capsys, checkpoint, split: str, *model) -> dict:
    file = tmp_path / f"split-{split}.yaml"
    file.write_text("model:\n  dtype: bfloat16\nparallel:\n  decode_ranks: 2\n  aco: 'off'\n"
                    f"  split_decode: '{split}'\ngeneration:\n  height: 64\n  width: 64\n  num_frames: 9\n")
    code = main(["dry-run", "--config", str(file), "--model-path", str(checkpoint), *model, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["mismatches"] == []
    return report


def test_split_decode_collectives_match_and_memory_is_reported(tmp_path, capsys, osp_demo):
    report = _report(tmp_path, capsys, osp_demo, "auto", "--model", "opensora-plan")
    decode = [r for r in report["ranks"] if r["role"] == "decode"]
    assert [r["rank"] for r in decode] == [1, 2]
    assert all(0 < r["split_peak_bytes"] <= r["peak_bytes"] for r in decode)
    group = next(g for g in report["collectives"] if g.get("members") == [1, 2] and "calls" in g)
    assert group["calls"]["1"] == group["calls"]["2"]  # the mode, then the latents
    assert [c.split("(")[0] for c in group["calls"]["1"]] == ["broadcast", "broadcast"]
    gather = next(g for g in report["collectives"] if g.get("members") == [2, 1] and "p2p_sends" in g)
    assert len(gather["p2p_sends"]) == 1  # one band back to the lead
    off = _report(tmp_path, capsys, osp_demo, "off", "--model", "opensora-plan")
    assert all(r["split_peak_bytes"] is None for r in off["ranks"])
    assert not any(g.get("members") == [1, 2] and "calls" in g for g in off["collectives"])
