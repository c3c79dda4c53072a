import re

import pytest

from pipedit.bench.rates import model_spec, step_flops
from pipedit.cli import main

# A model step's row ends with its TFLOP/s per denoise rank and share of the matmul rate.
ROW = re.compile(r"^(sync ulysses|pipesp chunk \d+|auto)\s+(-|\d+)\s+([\d.]+)\s+([\d.]+)x(?:\s+(\S+)\s+(\S+)%)?$")


def _rows(text):
    return {m.group(1): (m.group(2), float(m.group(3)), float(m.group(4)), m.group(5))
            for m in map(ROW.match, text.splitlines()) if m}


def test_attention_only_table(capsys):
    assert main(["bench", "sp", "--attention-only", "--heads", "5", "--head-dim", "8", "--seq-len", "33",
                 "--text-len", "4", "--repeats", "2"]) == 0
    rows = _rows(capsys.readouterr().out)
    # 5 heads on 2 ranks: up to 3 local heads, so chunks 1 and 2 are the candidates.
    assert set(rows) == {"sync ulysses", "pipesp chunk 1", "pipesp chunk 2", "auto"}
    assert rows["sync ulysses"][2] == 1.0
    assert all(ms > 0 for _, ms, _, _ in rows.values())


def test_model_step_table(ray_session, demo_checkpoint, capsys):
    assert main(["bench", "sp", "--model-path", str(demo_checkpoint), "--height", "64", "--width", "64",
                 "--num-frames", "5", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert set(rows) == {"sync ulysses", "pipesp chunk 1", "auto"}  # 4 heads on 2 ranks
    assert rows["auto"][0] in ("-", "1")
    # TFLOP/s per rank = the cost model's step FLOPs (the demo HunyuanVideo runs one forward per
    # step: embedded guidance) / the printed ms / 2 ranks; 3 significant digits printed.
    flops = step_flops(model_spec(demo_checkpoint), 64, 64, 5, 1)
    for _, ms, _, tflops in rows.values():
        assert float(tflops) == pytest.approx(flops / (ms / 1e3) / 2 / 1e12, rel=0.01)
    assert "float32 matmul rate on cpu (rank 0)" in out  # measured on a rank, not in this driver


def test_bench_needs_two_ulysses_ranks(capsys):
    assert main(["bench", "sp", "--ulysses", "1"]) == 2
    assert "--ulysses 2 or more" in capsys.readouterr().err


PIPELINE_ROW = re.compile(r"^(sequential|dedivae|dedivae\+aco\(\w+\))\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x\s+(\S+)\s+(\d+)$")


def test_pipeline_table(ray_session, demo_checkpoint, capsys):
    assert main(["bench", "pipeline", "--prompts", "2", "--repeats", "1", "--model-path", str(demo_checkpoint),
                 "--height", "64", "--width", "64", "--num-frames", "5", "--steps", "2", "--aco", "on"]) == 0
    out = capsys.readouterr().out
    rows = {m.group(1): m for m in map(PIPELINE_ROW.match, out.splitlines()) if m}
    assert set(rows) == {"sequential", "dedivae", "dedivae+aco(on)"}
    assert rows["sequential"].group(6) == "-"
    assert int(rows["dedivae"].group(7)) == 0 and int(rows["dedivae+aco(on)"].group(7)) > 0
    assert "ideal bound" in out and "peak memory per rank" in out
    # Denoising rates: 2 steps x the cost model's step FLOPs (one forward each) over the printed
    # mean denoise seconds, on 1 denoise rank; the rate measured on rank 0.
    assert "float32 matmul rate on cpu (rank 0)" in out
    flops = 2 * step_flops(model_spec(demo_checkpoint), 64, 64, 5, 1)
    rates = {fields[0]: fields[1:] for fields in map(str.split, out.splitlines()) if fields and fields[0] in rows
             and len(fields) == 5}
    assert set(rates) == set(rows)
    for tflop, seconds, tflops, share in rates.values():
        assert float(tflop) == pytest.approx(flops / 1e12, rel=1e-3) and share.endswith("%")
        assert float(tflops) == pytest.approx(flops / float(seconds) / 1e12, rel=0.01)


def test_handoff_table(ray_session, monkeypatch, capsys):
    import pipedit.bench.handoff as handoff

    monkeypatch.setattr(handoff, "SIZES", [("tiny", (1, 2, 3, 4, 5))])
    assert main(["bench", "handoff", "--repeats", "2"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny")]
    assert len(row) == 1
    store_ms, p2p_ms = map(float, row[0].split()[-2:])
    assert store_ms > 0 and p2p_ms > 0
