"""pipedit dry-run on the tiny demo checkpoints: every rank of a layout runs the engine's rank code
on fake tensors; collective sequences must agree; ranks that do not fit and mismatched sequences
exit 1."""

import json
import re
from dataclasses import replace

import pytest
import torch

from pipedit.cli import main


def _config(tmp_path, parallel: str, name: str = "config.yaml") -> str:
    file = tmp_path / name
    file.write_text("model:\n  dtype: bfloat16\nparallel:\n" + parallel +
                    "generation:\n  height: 64\n  width: 64\n  num_frames: 9\n")
    return str(file)


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(["dry-run", *argv])
    return code, capsys.readouterr().out


def test_every_rank_of_a_dedivae_aco_layout(tmp_path, capsys, demo_checkpoint):
    config = _config(tmp_path, "  ulysses: 2\n  decode_ranks: 2\n  aco: 'on'\n")
    code, out = _run(capsys, "--config", config, "--model-path", str(demo_checkpoint), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["mismatches"] == []
    roles = [(r["rank"], r["role"], r["helper"]) for r in report["ranks"]]
    assert roles == [(0, "denoise", False), (1, "denoise", False), (2, "decode", True), (3, "decode", True)]
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert by_rank[2]["holds"] == ["text", "vae"] and by_rank[0]["holds"] == ["dit"]
    assert all(r["by_kind"]["weights"] > 0 and r["peak_bytes"] >= sum(r["by_kind"].values()) for r in report["ranks"])
    ulysses = next(g for g in report["collectives"] if g.get("members") == [0, 1] and "calls" in g)
    assert ulysses["calls"]["0"] == ulysses["calls"]["1"] and len(ulysses["calls"]["0"]) > 0
    pairs = {tuple(g["members"]) for g in report["collectives"] if "p2p_sends" in g}
    assert (0, 2) in pairs and (2, 0) in pairs  # Aco heads out and back, the latent handoff


def test_cfg_parallel_groups_on_opensora_plan(tmp_path, capsys, osp_demo):
    config = _config(tmp_path, "  cfg_parallel: true\n  decode_ranks: 1\n  aco: 'off'\n")
    code, out = _run(capsys, "--config", config, "--model-path", str(osp_demo), "--model", "opensora-plan", "--json")
    report = json.loads(out)
    assert code == 0, report["mismatches"]
    assert [(r["role"], r["cfg_group"]) for r in report["ranks"]] == [("denoise", 0), ("denoise", 1), ("decode", None)]


def test_a_mismatched_sequence_is_reported(tmp_path, capsys, demo_checkpoint, monkeypatch):
    from pipedit.distributed.collectives import all_gather_async
    from pipedit.runtime.worker import DenoiseWorker

    step = DenoiseWorker.step

    def step_with_an_extra_collective_on_rank_1(self, aco=False):
        if self.rank == 1:  # a rank-dependent branch: the bug the dry run exists to catch
            all_gather_async(torch.empty(3), self.ctx.ulysses_group).wait()
        return step(self, aco)

    monkeypatch.setattr(DenoiseWorker, "step", step_with_an_extra_collective_on_rank_1)
    config = _config(tmp_path, "  ulysses: 2\n")
    code, out = _run(capsys, "--config", config, "--model-path", str(demo_checkpoint))
    assert code == 1
    assert re.search(r"group \[0, 1\]: call \d+ differs: rank 0 issues all_to_all_single\(.*\), "
                     r"rank 1 issues all_gather\(float32\[3\]", out)


def test_a_rank_that_does_not_fit_is_reported(tmp_path, capsys, demo_checkpoint, monkeypatch):
    from pipedit.planner import hardware

    monkeypatch.setitem(hardware.PROFILES, "l40", replace(hardware.PROFILES["l40"], memory=0.5e9))
    config = _config(tmp_path, "  ulysses: 2\n  decode_ranks: 1\n")
    code, out = _run(capsys, "--config", config, "--model-path", str(demo_checkpoint), "--gpu", "l40")
    assert code == 1
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and all(row.endswith(" NO") for row in rows)


def test_released_configs_have_the_planners_parameter_counts(tmp_path):
    from pipedit.adapter import load_adapter
    from pipedit.dryrun.fakeworld import fake_tensors
    from pipedit.dryrun.models import fake_loading
    from pipedit.dryrun.released import released_checkpoint
    from pipedit.planner.models import full_size

    for model in ("hunyuan-video", "opensora-plan"):
        path = released_checkpoint(model, tmp_path / model)
        with fake_tensors(), fake_loading():
            adapter = load_adapter(path, parts={"dit", "vae"}, dtype=torch.bfloat16, model=model)
            params = {k: sum(p.numel() for p in m.parameters()) for k, m in adapter.components.items()
                      if isinstance(m, torch.nn.Module)}
        spec = full_size(model)
        assert params["transformer"] == pytest.approx(spec.dit_params, rel=0.03), model
        assert params["vae"] < 2 * spec.vae_params, model  # decoder only on decode ranks

