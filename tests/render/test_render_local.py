"""`pipedit render` in-process on the demo model: shapes, bad lines, resuming, plain text."""

import os

import pytest
from render_helpers import read_manifest, write_jsonl

from pipedit.cli import main
from pipedit.video import read_mp4

LINES = [
    {"name": "fox", "prompt": "a red fox in the snow", "size": "64x32", "num_frames": 5, "steps": 2, "seed": 1},
    {"name": "odd", "prompt": "a size the model can't take", "size": "60x64", "num_frames": 5, "steps": 2},
    {"name": "sea", "prompt": "waves on a beach", "height": 64, "width": 64, "num_frames": 9, "steps": 2, "seed": 2},
    {"prompt": "city lights at night", "size": "32x32", "num_frames": 1, "steps": 1, "seed": 3},
]
SHAPES = {"fox.mp4": (5, 32, 64), "sea.mp4": (9, 64, 64), "0004-city-lights-at-night.mp4": (1, 32, 32)}


def render(prompts, out_dir, checkpoint, *flags):
    return main(["render", str(prompts), "--out-dir", str(out_dir), "--model-path", str(checkpoint), *flags])


def mtimes(out_dir):
    return {name: os.stat(out_dir / name).st_mtime_ns for name in SHAPES}


@pytest.fixture
def rendered(tmp_path, demo_checkpoint, capsys):
    """The 4-line file rendered once: (prompts path, out dir, first run's exit code, its stdout)."""
    prompts, out_dir = write_jsonl(tmp_path / "prompts.jsonl", LINES), tmp_path / "out"
    code = render(prompts, out_dir, demo_checkpoint)
    return prompts, out_dir, code, capsys.readouterr().out


def test_bad_line_fails_alone_and_the_rest_render_their_shapes(rendered):
    prompts, out_dir, code, summary = rendered
    assert code == 1
    for name, (frames, height, width) in SHAPES.items():
        assert read_mp4(out_dir / name).shape == (frames, height, width, 3)
    assert sorted(p.name for p in out_dir.glob("*.mp4")) == sorted(SHAPES)
    entries = read_manifest(out_dir)
    assert [(e["line"], e["status"]) for e in entries] == [(1, "done"), (2, "failed"), (3, "done"), (4, "done")]
    bad = entries[1]
    assert "multiples of 16" in bad["error"] and bad["width"] == 60 and "file" not in bad
    assert entries[0]["seed"] == 1 and entries[0]["steps"] == 2 and entries[0]["latency_s"] > 0
    assert {"encode_s", "denoise_s", "decode_s"} <= set(entries[0]["timings"])
    odd_row = next(row for row in summary.splitlines() if " odd " in row)
    assert odd_row.split()[:3] == ["2", "odd", "failed"] and "multiples of 16" in odd_row
    assert "3 rendered, 0 skipped (already complete), 1 failed" in summary


def test_rerun_renders_nothing_new(rendered, demo_checkpoint, submits, capsys):
    prompts, out_dir, _, _ = rendered
    before = mtimes(out_dir)
    assert render(prompts, out_dir, demo_checkpoint) == 1  # the bad line still fails
    assert submits.prompts == [] and mtimes(out_dir) == before
    summary = capsys.readouterr().out
    assert "0 rendered, 3 skipped (already complete), 1 failed" in summary
    assert [e["status"] for e in read_manifest(out_dir)] == ["done", "failed", "done", "done"]


def test_edited_line_and_damaged_video_render_again(rendered, demo_checkpoint, submits):
    prompts, out_dir, _, _ = rendered
    before = mtimes(out_dir)
    # The fox's seed changed; the bad line commented out (line numbers, and so default names, hold).
    edited = [dict(LINES[0], seed=5), "# " + str(LINES[1]), LINES[2], LINES[3]]
    write_jsonl(prompts, edited)
    video = out_dir / "0004-city-lights-at-night.mp4"
    video.write_bytes(video.read_bytes()[:100])  # cut short, as by a crash outside write_mp4
    assert render(prompts, out_dir, demo_checkpoint) == 0
    assert sorted(submits.prompts) == sorted([LINES[0]["prompt"], LINES[3]["prompt"]])
    after = mtimes(out_dir)
    assert after["sea.mp4"] == before["sea.mp4"] and after["fox.mp4"] != before["fox.mp4"]
    assert read_mp4(video).shape == (1, 32, 32, 3)
    entries = read_manifest(out_dir)
    assert [(e["line"], e["name"], e["status"]) for e in entries] == [
        (1, "fox", "done"), (3, "sea", "done"), (4, "0004-city-lights-at-night", "done")]
    assert entries[0]["seed"] == 5


def test_run_killed_midway_resumes_without_redoing(tmp_path, demo_checkpoint, submits, monkeypatch):
    import pipedit.render.local as local

    good = [LINES[0], LINES[2], LINES[3]]
    prompts, out_dir = write_jsonl(tmp_path / "prompts.jsonl", good), tmp_path / "out"
    real_write, written = local.write_mp4, []

    def write_then_die(frames, path, fps, sound=None):
        if written:  # the second video: the process "dies" while writing it, leaving a partial file
            (path.parent / f".{path.name}.partial.mp4").write_bytes(b"half a video")
            raise KeyboardInterrupt
        written.append(path.name)
        return real_write(frames, path, fps=fps, sound=sound)

    monkeypatch.setattr(local, "write_mp4", write_then_die)
    assert render(prompts, out_dir, demo_checkpoint) == 130
    assert written == ["fox.mp4"]
    assert [e["status"] for e in read_manifest(out_dir)] == ["done", "pending", "pending"]
    fox_mtime = os.stat(out_dir / "fox.mp4").st_mtime_ns

    monkeypatch.setattr(local, "write_mp4", real_write)
    submits.prompts.clear()
    assert render(prompts, out_dir, demo_checkpoint) == 0
    assert sorted(submits.prompts) == sorted([LINES[2]["prompt"], LINES[3]["prompt"]])
    assert os.stat(out_dir / "fox.mp4").st_mtime_ns == fox_mtime
    assert [e["status"] for e in read_manifest(out_dir)] == ["done", "done", "done"]
    assert read_mp4(out_dir / "sea.mp4").shape == (9, 64, 64, 3)


def test_plain_text_prompts(tmp_path, demo_checkpoint, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# two prompts\n\na lighthouse in a storm\n  a kite over a hill  \n")
    out_dir = tmp_path / "out"
    flags = ["--height", "32", "--width", "48", "--num-frames", "5", "--steps", "1", "--seed", "4"]
    assert render(prompts, out_dir, demo_checkpoint, *flags) == 0
    entries = read_manifest(out_dir)
    assert [(e["line"], e["file"], e["seed"]) for e in entries] == [
        (3, "0003-a-lighthouse-in-a-storm.mp4", 4), (4, "0004-a-kite-over-a-hill.mp4", 4)]
    assert entries[1]["prompt"] == "a kite over a hill"
    for entry in entries:
        assert read_mp4(out_dir / entry["file"]).shape == (5, 32, 48, 3)


def test_unusable_arguments_exit_2(tmp_path, demo_checkpoint, capsys):
    assert render(tmp_path / "missing.jsonl", tmp_path / "out", demo_checkpoint) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    assert render(empty, tmp_path / "out", demo_checkpoint) == 2
    assert "has no prompts" in capsys.readouterr().err


@pytest.mark.slow
def test_decode_ranks_pipeline_gives_the_single_rank_videos(tmp_path, demo_checkpoint, ray_session, monkeypatch):
    """DeDiVAE across the file's prompts (Ray rank actors) renders what one rank renders.

    The ranks run with this process's torch thread count: with another count, float sums reorder
    (~1e-7), a pixel on a uint8 boundary moves one level, and x264 spreads that over up to 11 levels
    of its block; with the same count and CPU the frames agree, and the bound leaves 2 levels for
    the encoder."""
    import numpy as np
    import torch

    from pipedit.runtime.rank import CPU_THREADS_ENV

    monkeypatch.setenv(CPU_THREADS_ENV, str(torch.get_num_threads()))

    prompts = write_jsonl(tmp_path / "prompts.jsonl", [LINES[0], LINES[2], LINES[3]])
    assert render(prompts, tmp_path / "one", demo_checkpoint) == 0
    assert render(prompts, tmp_path / "split", demo_checkpoint, "--decode-ranks", "1") == 0
    names = [entry["file"] for entry in read_manifest(tmp_path / "split")]
    assert len(names) == 3
    for name in names:
        a, b = read_mp4(tmp_path / "one" / name), read_mp4(tmp_path / "split" / name)
        assert a.shape == b.shape and np.abs(a.astype(int) - b.astype(int)).max() <= 2, name
