import re

import pytest
import torch

from pipedit.adapter import VideoShape
from pipedit.bench.vae import measure_in_fresh_process, format_table
from pipedit.cli import main

ROW = re.compile(r"^(off|on)\s+([\d.]+)\s+(\d+)\s+([\d.]+|n/a)\s+([\d.]+)\s+(\S+)$")
# Larger than diffusers' 256-pixel tiles, so that "on" really splits the frames (2 x 2 tiles).
SHAPE = VideoShape(height=272, width=272, num_frames=1)


def _rows(text):
    return {m.group(1): m.groups()[1:] for m in map(ROW.match, text.splitlines()) if m}


def test_measure_and_table(demo_checkpoint):
    # Fresh processes: a peak above what was in use before needs a process that never peaked higher.
    runs = [measure_in_fresh_process(str(demo_checkpoint), "cpu", None, SHAPE, mode, 0) for mode in ("off", "on")]
    off, on = runs
    assert (off.decoder_calls, on.decoder_calls) == (1, 4)
    assert off.frames.shape == on.frames.shape == (1, 272, 272, 3)
    assert off.predicted_bytes == on.predicted_bytes > 0
    assert off.peak_bytes > 0 and on.peak_bytes > 0
    rows = _rows(format_table(runs, SHAPE, torch.device("cpu")))
    assert set(rows) == {"off", "on"}
    assert rows["off"][4] == "-"
    assert float(rows["on"][4]) == pytest.approx((on.frames - off.frames).abs().max().item(), rel=1e-2)
    assert float(rows["on"][4]) > 0


@pytest.mark.slow
def test_cli_runs_each_mode_in_a_fresh_process(demo_checkpoint, capsys):
    assert main(["bench", "vae", "--model-path", str(demo_checkpoint), "--height", "64", "--width", "64",
                 "--num-frames", "5", "--tiling", "off"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert set(rows) == {"off"} and rows["off"][2] != "n/a"
    assert "VmHWM" in out


def test_cli_refuses_a_size_the_model_cannot_take(demo_checkpoint, capsys):
    assert main(["bench", "vae", "--model-path", str(demo_checkpoint), "--height", "100"]) == 2
    assert "multiples of 16" in capsys.readouterr().err
