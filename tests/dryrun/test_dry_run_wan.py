"""pipedit dry-run on Wan's released configs (pipedit.dryrun.released_wan): the modules built from
them have the planner's parameter counts, and one rank of wan-1.3b runs the engine's rank code on
fake tensors with the planner's memory."""

import json

import pytest
import torch

from pipedit.cli import main


def test_released_wan_configs_have_the_planners_parameter_counts(tmp_path):
    from pipedit.adapter import load_adapter
    from pipedit.dryrun.fakeworld import fake_tensors
    from pipedit.dryrun.models import fake_loading
    from pipedit.dryrun.released import released_checkpoint
    from pipedit.planner.models import full_size

    path = released_checkpoint("wan-a14b", tmp_path / "a14b")
    with fake_tensors(), fake_loading():
        adapter = load_adapter(path, parts={"dit"}, dtype=torch.bfloat16, model="wan")
        counts = [sum(p.numel() for p in expert.parameters()) for expert in adapter.experts]
    spec = full_size("wan-a14b")
    assert counts == [spec.dit_params] * spec.experts == [spec.dit_params] * 2


def test_one_rank_of_wan_1_3b_from_the_released_configs(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\ngeneration:\n  height: 64\n  width: 64\n  num_frames: 5\n")
    assert main(["dry-run", "--config", str(config), "--model", "wan-1.3b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["released_configs"] and report["model"] == "wan-1.3b"
    (rank,) = report["ranks"]
    assert rank["holds"] == ["dit", "text", "vae"]
    # At 64x64x5 the weights are nearly all of it: the planner's count of the same modules (DiT,
    # UMT5-XXL, VAE in bf16, from the dims) and the dry run's storages agree within 5%.
    assert rank["planner_error"] == pytest.approx(0.0, abs=0.05)
    assert main(["dry-run", "--config", str(config), "--model", "wan"]) == 2
    assert "wan-14b" in capsys.readouterr().err


def test_an_offloaded_idle_expert_is_not_counted(tmp_path, capsys):
    """wan-a14b on one rank with model.idle_expert offload: the rank's weights are one expert,
    UMT5 and the VAE (the planner's count of the same), not two experts, also after the second
    step ran the low-noise expert (timesteps 999, 750 with the boundary at 875: the forward's
    views of the idle expert's weights stay uncounted)."""
    from pipedit.planner.models import full_size

    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\n  idle_expert: offload\n"
                      "generation:\n  height: 64\n  width: 64\n  num_frames: 5\n")
    assert main(["dry-run", "--config", str(config), "--model", "wan-a14b", "--steps", "2", "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    spec = full_size("wan-a14b")
    one_expert = 2 * (spec.dit_params + spec.text_params + spec.vae_params)
    assert rank["by_kind"]["weights"] == pytest.approx(one_expert, rel=0.01)
    assert rank["planner_error"] == pytest.approx(0.0, abs=0.05)
