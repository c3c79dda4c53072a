"""Planner invariants (not timings): monotonic in steps, memory-infeasible configurations never
ranked, the balance rule reproduced by the schedule simulation, DES sanity, the CLI's outputs."""

import re
from dataclasses import replace

import pytest

from pipedit.cli import main
from pipedit.config import load_config
from pipedit.integrations.hunyuan_video.planner import hunyuan_video
from pipedit.planner import balance_decode_ranks
from pipedit.planner.cost import Layout, Shape, step_seconds, step_work
from pipedit.planner.hardware import node
from pipedit.planner.models import from_checkpoint, full_size
from pipedit.planner.search import Problem, candidates, predict, rank
from pipedit.planner.simulate import Timings, simulate
from pipedit.planner.vae_cost import vae_decode_flops

SHAPE = Shape(height=544, width=960, frames=65)


def _problem(steps: int, gpu="h100", prompts=4, shape=SHAPE, model="hunyuan-video") -> Problem:
    return Problem(full_size(model), node(gpu, 8, "nvlink" if gpu == "h100" else "pcie"), shape, steps, prompts)


@pytest.mark.parametrize("model", ["hunyuan-video", "opensora-plan"])
def test_more_steps_are_never_faster(model):
    for c in candidates(full_size(model), 8)[::7]:
        times = [predict(_problem(steps, model=model), c) for steps in (1, 2, 10, 11, 50)]
        assert all(a.batch_s <= b.batch_s for a, b in zip(times, times[1:])), c
        assert all(a.latency_s <= b.latency_s for a, b in zip(times, times[1:])), c


def test_memory_infeasible_configurations_are_not_ranked():
    # 1280x720x129 on 80 GB: untiled HunyuanVideo VAE decodes do not fit, tiled ones do.
    problem = _problem(50, shape=Shape(720, 1280, 129))
    fitting, too_big = rank(problem)
    assert fitting and too_big
    # What the comment says: at this shape the VAE tiling decides whether a configuration fits.
    assert all(x.candidate.tiled for x in fitting)
    assert not any(x.candidate.tiled for x in too_big)
    assert {x.candidate for x in fitting}.isdisjoint({x.candidate for x in too_big})
    small = replace(problem, node=replace(problem.node, gpu=replace(problem.node.gpu, memory=8e9)))
    fitting, too_big = rank(small)
    assert fitting == [] and len(too_big) == len(candidates(problem.model, 8))


def _ideal(t_denoise: float, t_decode: float, ranks: int, decode: int, steps: int = 10) -> Timings:
    """Perfect strong scaling of the DiT over the denoise ranks, no communication."""
    return Timings(steps=steps, step_s=t_denoise / steps / (ranks - decode), decode_s=t_decode, decode_ranks=decode)


@pytest.mark.parametrize("t_denoise, t_decode", [(6.0, 2.0), (1.0, 1.0), (20.0, 1.0), (1.0, 3.0)])
def test_simulation_best_decode_ranks_reproduces_the_balance_rule(t_denoise, t_decode):
    ranks = 8
    batch = {v: simulate(_ideal(t_denoise, t_decode, ranks, v), 40).batch_s for v in range(1, ranks)}
    assert min(batch, key=batch.get) == balance_decode_ranks(t_denoise, t_decode, ranks)


def test_dedivae_batch_is_k_denoises_plus_one_decode_when_decode_is_shorter():
    t = Timings(steps=10, step_s=0.3, decode_s=1.0, decode_ranks=1)
    for k in (1, 3, 8):
        assert simulate(t, k).batch_s == pytest.approx(k * 3.0 + 1.0)
    sequential = replace(t, decode_ranks=0)
    assert simulate(sequential, 8).batch_s == pytest.approx(8 * 4.0)


def test_aco_only_while_the_decode_queue_is_empty():
    # The first request's decode outlasts the second's denoising: only request 1 gets Aco steps.
    t = Timings(steps=5, step_s=1.0, step_aco_s=0.5, decode_s=100.0, decode_ranks=1)
    outcome = simulate(t, 2)
    assert outcome.aco_steps == 5
    assert outcome.done_s[0] == pytest.approx(2.5 + 100.0)
    assert outcome.batch_s == pytest.approx(max(2.5 + 100.0, 2.5 + 5.0) + 100.0)
    # Decodes shorter than a step: only each later request's first step finds a decode running.
    quick = replace(t, decode_s=0.1)
    assert simulate(quick, 3).aco_steps == 15 - 2


def test_costs_grow_with_the_work():
    model = hunyuan_video()
    n = node("h100", 8, "nvlink")
    small, big = Shape(352, 480, 65), Shape(576, 1024, 97)
    assert step_work(model, big).attention_flops > step_work(model, small).attention_flops
    assert step_seconds(model, big, n, Layout(8)) > step_seconds(model, small, n, Layout(8))
    assert step_seconds(model, small, n, Layout(4)) > step_seconds(model, small, n, Layout(8))
    assert vae_decode_flops(model, 576, 1024, 97, tiled=True) > vae_decode_flops(model, 576, 1024, 97, tiled=False)
    assert vae_decode_flops(model, 352, 480, 97, False) > vae_decode_flops(model, 352, 480, 65, False)


def test_skiparse_cuts_opensora_plan_attention():
    model = full_size("opensora-plan")
    dense = replace(model, sparse_layers=0)
    assert step_work(model, SHAPE).attention_flops < 0.5 * step_work(dense, SHAPE).attention_flops


def test_model_spec_from_the_demo_checkpoint(demo_checkpoint):
    spec = from_checkpoint(demo_checkpoint)
    assert (spec.heads, spec.head_dim, spec.dual_layers, spec.single_layers) == (4, 16, 2, 2)
    assert spec.vae["block_out_channels"] == [8, 8, 8, 8]
    assert 0 < spec.dit_params < 10e6 and spec.text_encoders


def test_plan_prints_a_ranked_table_and_writes_a_loadable_config(tmp_path, capsys):
    out = tmp_path / "best.yaml"
    assert main(["plan", "--model", "hunyuan-video", "--gpus", "8", "--gpu", "h100", "--interconnect", "nvlink",
                 "--height", "720", "--width", "1280", "--frames", "129", "--steps", "50", "--prompts", "4",
                 "--write", str(out)]) == 0
    text = capsys.readouterr().out
    assert "physical limit:" in text and "does not fit" in text
    first = re.search(r"^\s+1\s+(\d+)\s+(\d+)x(\d+)\s+(\S+)\s+(on|off)\s+(on|off)", text, re.M)
    config = load_config(out)
    decode, ulysses, ring, chunk, aco, tiling = first.groups()
    p = config.parallel
    assert (p.decode_ranks, p.ulysses, p.ring) == (int(decode), int(ulysses), int(ring))
    assert str(p.pipesp_chunk) == chunk and p.aco == aco and config.model.vae_tiling == tiling
    assert (config.generation.height, config.generation.width, config.generation.num_frames) == (720, 1280, 129)


def test_plan_refuses_bad_shapes(capsys):
    assert main(["plan", "--frames", "18"]) == 2
    assert "4k+1" in capsys.readouterr().err


def test_validate_paper_prints_sixteen_rows_and_the_tally(capsys):
    assert main(["plan", "--validate-paper"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in lines if re.match(r"^(opensora-plan|hunyuan-video) ", line)]
    assert len(rows) == 16
    tally = re.fullmatch(r"(\d+) of 16 predicted speedups within 25% of the paper's", lines[-1])
    assert tally and int(tally.group(1)) >= 12


def _cell(method, decode, ulysses, chunk, aco, batch):
    return {"method": method, "width": 960, "height": 544, "frames": 65, "steps": 30, "prompts": 4, "ranks": 8,
            "layout": {"ulysses": ulysses, "ring": 1, "decode_ranks": decode, "pipesp_chunk": chunk, "aco": aco,
                       "offload_idle": False},
            "batch_time_s": batch, "failures": []}


def test_compare_prints_predicted_beside_measured(demo_checkpoint, tmp_path, capsys):
    report = {"cells": [_cell("base", 0, 8, None, False, 100.0), _cell("dedivae", 2, 6, None, False, 80.0),
                        _cell("all", 2, 6, 1, True, 70.0)]}
    path = tmp_path / "latency.json"
    path.write_text(__import__("json").dumps(report))
    assert main(["plan", "--gpu", "h100", "--model-path", str(demo_checkpoint), "--compare", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["base", "dedivae", "all"]
    assert re.fullmatch(r"\d of 3 cells predicted within 30% of the measured batch time", lines[5])
    assert lines[6].startswith("960x544x65, 30 steps: planner picks ")
    (tmp_path / "bad.json").write_text("{}")
    assert main(["plan", "--gpu", "h100", "--compare", str(tmp_path / "bad.json")]) == 2


def test_opensora_plan_spec_from_checkpoint_configs(tmp_path, capsys):
    import json

    (tmp_path / "transformer").mkdir()
    (tmp_path / "vae").mkdir()
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "OpenSoraPlanPipeline"}))
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(
        {"num_attention_heads": 4, "attention_head_dim": 24, "num_layers": 6, "in_channels": 8,
         "sparse1d": True, "sparse_n": 4}))
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"base_channels": 16, "connect_res_layer_num": 1}))
    from pipedit.planner.models import family_of

    assert family_of(tmp_path) == "opensora-plan"
    spec = from_checkpoint(tmp_path, "opensora-plan")
    assert (spec.hidden, spec.layers, spec.sparse_layers, spec.cfg_batch) == (96, 6, 4, 2)
    assert spec.vae["base_channels"] == 16 and spec.vae["connect_res_layer_num"] == 1


def test_plan_reads_the_opensora_plan_release_layout(osp_demo, capsys):
    from pipedit.planner.models import family_of

    assert family_of(osp_demo) == "opensora-plan"
    spec = from_checkpoint(osp_demo, "opensora-plan")
    assert (spec.heads, spec.head_dim, spec.layers, spec.sparse_layers) == (2, 12, 6, 4)
    assert spec.vae["base_channels"] == 8 and spec.dit_params > 0
    assert main(["plan", "--model-path", str(osp_demo), "--gpus", "2", "--height", "64", "--width", "64",
                 "--frames", "9", "--steps", "2", "--top", "2"]) == 0
    assert "(OpenSoraPlan, 2x12)" in capsys.readouterr().out
