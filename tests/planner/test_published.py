"""The planner against published multi-GPU runs (pipedit.planner.published): every cell predicted
and printed with its source, the fitted sequence-parallel overhead is the fit's value, and the
overhead leaves one-rank steps alone."""

import re
from dataclasses import replace

import pytest

from pipedit.cli import main
from pipedit.planner import published
from pipedit.planner.cost import Layout, Shape, step_seconds
from pipedit.planner.hardware import PROFILES, SP_OVERHEAD, GpuProfile, make_node, profile
from pipedit.planner.models import full_size


def test_the_fitted_overhead_is_the_constant_the_profiles_use():
    assert published.fit_sp_overhead() == pytest.approx(SP_OVERHEAD)
    assert {p.sp_overhead for p in PROFILES.values()} == {SP_OVERHEAD}


def test_the_overhead_closes_the_eight_gpu_gap_that_motivated_it():
    """xDiT's 1280x720x129 on 8 H100s: 338 s published. Without the term the planner said 239 s."""
    eight = next(c for c in published.CELLS if c.fitted and c.gpus == 8)
    assert eight.seconds == 337.58
    assert published.predict_cell(eight, sp_overhead=0.0) / eight.seconds < 0.75
    assert published.predict_cell(eight) / eight.seconds == pytest.approx(1.0, abs=0.15)


def test_the_overhead_grows_with_ranks_and_spares_one_rank():
    model, shape = full_size("hunyuan-video"), Shape(720, 1280, 129)
    h100 = profile("h100")
    plain = replace(h100, sp_overhead=0.0)

    def slowdown(ranks: int) -> float:
        return (step_seconds(model, shape, make_node(h100, ranks, "nvlink"), Layout(ranks))
                / step_seconds(model, shape, make_node(plain, ranks, "nvlink"), Layout(ranks)))

    assert slowdown(1) == 1.0
    assert 1.0 < slowdown(2) < slowdown(4) < slowdown(8) < 1 + 7 * SP_OVERHEAD + 1e-9


def test_a_measured_profile_has_no_overhead():
    """The CPU profile (and its cache written before the field existed) leaves the field at its
    default: its collectives are fitted to a measured multi-rank step instead."""
    assert GpuProfile("measured", 1e9, 1e9, 1e9, 1.0, 1.0, 1.0).sp_overhead == 0.0


def test_validate_published_prints_every_cell_with_its_source_and_the_medians(capsys):
    assert main(["plan", "--validate-published"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in lines if re.search(r"\[(xdit|lightx2v)\]$", line)]
    assert len(rows) == len(published.CELLS) == 17
    for row, cell in zip(rows, published.CELLS):
        published_s, predicted_s, ratio = (float(x) for x in row.split()[-4:-1])
        assert published_s == pytest.approx(cell.seconds) and ratio == pytest.approx(predicted_s / published_s, abs=0.01)
    assert any(line.startswith("[xdit] github.com/xdit-project/xDiT docs/performance/hunyuanvideo.md") for line in lines)
    assert any(line.startswith("[lightx2v] github.com/ModelTC/LightX2V README.md") for line in lines)
    medians = re.search(r"^median predicted/published: (\d\.\d\d) all 17 cells \((\d\.\d\d) without", lines[-2])
    assert medians and float(medians.group(2)) < float(medians.group(1)) <= 1.05
    assert lines[-1].startswith("median predicted/published speedup over one GPU, xDiT HunyuanVideo: 1.00 (")
