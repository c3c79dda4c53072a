"""`pipedit render --endpoint`: the same file through a running server gives the same videos."""

import numpy as np
from render_helpers import read_manifest, write_jsonl

from pipedit.cli import main
from pipedit.video import read_mp4

LINES = [
    {"name": "fox", "prompt": "a red fox in the snow", "size": "64x32", "num_frames": 5, "steps": 2, "seed": 1},
    {"name": "odd", "prompt": "a frame count the model can't take", "size": "64x64", "num_frames": 6, "steps": 2},
    {"name": "sea", "prompt": "waves on a beach", "size": "48x64", "num_frames": 9, "steps": 2, "seed": 2},
    {"name": "sky", "prompt": "clouds over hills", "size": "32x32", "num_frames": 1, "steps": 3, "seed": 3},
]
TOLERANCE = 2  # of 255: both runs decode the same latents; the mp4 encoding is deterministic




def test_endpoint_renders_the_same_videos_as_in_process(tmp_path, demo_checkpoint, server, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", LINES)
    remote, local = tmp_path / "remote", tmp_path / "local"
    common = ["render", str(prompts), "--fps", "8"]
    assert main([*common, "--out-dir", str(remote), "--endpoint", server.url, "--max-in-flight", "2"]) == 1
    summary = capsys.readouterr().out
    assert main([*common, "--out-dir", str(local), "--model-path", str(demo_checkpoint)]) == 1

    entries = read_manifest(remote)
    assert [(e["line"], e["status"]) for e in entries] == [(1, "done"), (2, "failed"), (3, "done"), (4, "done")]
    assert "num_frames" in entries[1]["error"] and "2     odd" in summary
    assert entries[2]["seed"] == 2 and entries[2]["fps"] == 8 and "denoise_s" in entries[2]["timings"]
    for name in ("fox.mp4", "sea.mp4", "sky.mp4"):
        a, b = read_mp4(remote / name), read_mp4(local / name)
        assert a.shape == b.shape
        assert np.abs(a.astype(int) - b.astype(int)).max() <= TOLERANCE, name
    assert read_mp4(remote / "sea.mp4").shape == (9, 64, 48, 3)


def test_endpoint_rerun_submits_nothing(tmp_path, server, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [LINES[0], LINES[3]])
    out_dir = tmp_path / "out"
    args = ["render", str(prompts), "--out-dir", str(out_dir), "--endpoint", server.url]
    assert main(args) == 0
    jobs_before = len(server.service.store.list(limit=1000)[0])
    capsys.readouterr()
    assert main(args) == 0
    assert "0 rendered, 2 skipped" in capsys.readouterr().out
    assert len(server.service.store.list(limit=1000)[0]) == jobs_before


def test_unreachable_endpoint_is_a_user_error(tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", [LINES[0]])
    code = main(["render", str(prompts), "--out-dir", str(tmp_path / "out"), "--endpoint", "http://127.0.0.1:9"])
    assert code == 2 and "cannot reach" in capsys.readouterr().err


def test_api_key_is_sent_and_a_refusal_fails_the_lines(tmp_path, demo_checkpoint, capsys):
    from serve_helpers import start

    running = start(demo_checkpoint, tmp_path / "data", api_keys=("secret",))
    try:
        prompts = write_jsonl(tmp_path / "prompts.jsonl", [LINES[3]])
        args = ["render", str(prompts), "--endpoint", running.url]
        assert main([*args, "--out-dir", str(tmp_path / "nokey")]) == 1
        (entry,) = read_manifest(tmp_path / "nokey")
        assert entry["status"] == "failed" and "401" in entry["error"]
        assert main([*args, "--out-dir", str(tmp_path / "key"), "--api-key", "secret"]) == 0
        assert read_mp4(tmp_path / "key" / "sky.mp4").shape == (1, 32, 32, 3)
    finally:
        running.close()
