"""pipedit dry-run on HunyuanVideo 1.5's released configs (pipedit.integrations.hunyuan_video_15.released):
one rank of each task runs the engine's rank code on fake tensors, through the dry run's packed
stand-in for the DiT's forward (pipedit.integrations.hunyuan_video_15.dryrun), with the planner's
memory."""

import json

import pytest

from pipedit.cli import main


@pytest.mark.slow
@pytest.mark.parametrize("release", ["hunyuan-video-1.5", "hunyuan-video-1.5-i2v"])
def test_one_rank_of_hunyuan_video_15_from_the_released_configs(tmp_path, capsys, release):
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\ngeneration:\n  height: 64\n  width: 64\n  num_frames: 5\n")
    assert main(["dry-run", "--config", str(config), "--model", release, "--steps", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["released_configs"] and report["model"] == release
    (rank,) = report["ranks"]
    assert rank["holds"] == ["dit", "text", "vae"]
    # At 64x64x5 the weights are nearly all of it: the planner's count of the same modules (DiT,
    # Qwen2.5-VL's text model, ByT5, image-to-video's SigLIP, VAE in bf16) and the dry run's
    # storages agree within 5%.
    assert rank["planner_error"] == pytest.approx(0.0, abs=0.05)
