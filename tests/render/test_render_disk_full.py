"""`pipedit render` on a full disk: no cut-short video under a final name; a video that cannot be
written fails its line, and a full disk (the video's or the manifest's ENOSPC) stops the run
with one line on stderr and exit code 3 (EXIT_OUTPUT_ERROR), no traceback."""

import contextlib
import errno
import time

import torch
from render_helpers import read_manifest, write_jsonl

import pipedit.render.manifest as manifest
import pipedit.video as video
from pipedit.cli import main
from pipedit.config import GenerationDefaults
from pipedit.render.batch import EXIT_OUTPUT_ERROR, Batch
from pipedit.render.local import LocalRunner
from pipedit.render.prompts import read_lines
from pipedit.request import VideoResult

LINES = [{"name": "fox", "prompt": "a fox", "size": "16x16", "num_frames": 5, "steps": 1},
         {"name": "sea", "prompt": "the sea", "size": "16x16", "num_frames": 5, "steps": 1}]


@contextlib.contextmanager
def _empty_writer(path, **kwargs):
    open(path, "wb").close()  # what ffmpeg leaves when the disk is full before its first byte
    yield type("W", (), {"append_data": lambda self, image: None})()


def _render(tmp_path, capsys):
    """Runs the local runner's write step on made-up outcomes (no engine)."""
    lines = read_lines(write_jsonl(tmp_path / "prompts.jsonl", LINES), GenerationDefaults(), "test-model")

    def runner(pending, out_dir, batch):
        for line in pending:
            result = VideoResult(line.name, torch.rand(5, 16, 16, 3), torch.zeros(1))
            LocalRunner(None)._finish(batch, line, result, out_dir, time.perf_counter())

    out_dir = tmp_path / "out"
    code = Batch(lines, out_dir, quiet=True).run(runner)
    return code, out_dir, capsys.readouterr()


def test_a_cut_short_video_fails_its_line_and_leaves_no_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(video.imageio, "get_writer", _empty_writer)
    monkeypatch.setattr(video, "_disk_full", lambda folder: False)
    code, out_dir, _ = _render(tmp_path, capsys)
    assert code == 1
    assert [(e["status"], e["error"].split(":")[0]) for e in read_manifest(out_dir)] == \
        [("failed", "writing the mp4 failed")] * 2
    assert sorted(p.name for p in out_dir.iterdir()) == ["manifest.jsonl"]


def test_a_full_disk_stops_the_run_with_exit_code_3(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(video.imageio, "get_writer", _empty_writer)
    monkeypatch.setattr(video, "_disk_full", lambda folder: True)
    code, out_dir, captured = _render(tmp_path, capsys)
    assert code == EXIT_OUTPUT_ERROR == 3
    message = captured.err.strip().splitlines()[-1]  # after the (disabled) bar: one line
    assert "Traceback" not in captured.err
    assert message.startswith("pipedit: error: cannot write") and "No space left on device" in message
    assert [e["status"] for e in read_manifest(out_dir)] == ["failed", "pending"]  # stopped after the first
    assert sorted(p.name for p in out_dir.iterdir()) == ["manifest.jsonl"]


def test_a_full_disk_while_writing_the_manifest_is_one_line_and_exit_code_3(tmp_path, capsys, monkeypatch,
                                                                             demo_checkpoint):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(manifest.os, "fsync", no_space)
    prompts = write_jsonl(tmp_path / "prompts.jsonl", LINES)
    out_dir = tmp_path / "out"
    code = main(["render", str(prompts), "--out-dir", str(out_dir), "--model-path", str(demo_checkpoint)])
    captured = capsys.readouterr()
    assert code == 3 and "Traceback" not in captured.err
    assert captured.err.strip().splitlines()[-1] == (f"pipedit: error: cannot write {out_dir / 'manifest.jsonl'}: No space left on "
                                    "device; free some space and rerun the same command to resume")
    assert list(out_dir.iterdir()) == []  # no partial manifest left
