"""pipedit dry-run on Wan's released configs (pipedit.integrations.wan.released): the modules built from
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
    assert main(["dry-run", "--config", str(config), "--model", "wan-1.3b", "--steps", "1", "--json"]) == 0
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
    assert rank["host_bytes"] == pytest.approx(2 * spec.dit_params, rel=0.01)  # the idle expert, mapped


def test_image_to_video_with_compile_runs_eager_on_the_placeholder_image(tmp_path, capsys):
    """Wan2.1 I2V on 3 ranks (the decode rank encodes the prompt and the image: the CLIP image
    encoder and the VAE's encoder run too) with model.compile: the blocks run eagerly, and the
    report says so."""
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    dims = WanDims(heads=2, head_dim=8, text_dim=24, ffn_dim=40, image_dim=20, image_size=24, seed=9)
    path = write_demo_checkpoint(tmp_path / "i2v", dims, preset="i2v")
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\n  compile: true\nparallel:\n  ulysses: 2\n  decode_ranks: 1\n"
                      "generation:\n  height: 64\n  width: 64\n  num_frames: 9\n")
    assert main(["dry-run", "--config", str(config), "--model-path", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["compile_ran_eager"] and report["mismatches"] == []
    assert report["ranks"][2]["holds"] == ["text", "vae"]
