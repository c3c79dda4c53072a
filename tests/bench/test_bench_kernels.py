"""`pipedit bench kernels` and the FLOP counts every bench divides by (pipedit.planner.cost.block_work):
the counts against a hand count and against torch's FLOP counter on the bench's own block, the
rate flag, a scaled CPU run of the command, and its calibration for the planner."""

import json
from dataclasses import replace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from pipedit.bench.kernels import SpecBlock, calibration
from pipedit.bench.rates import achieved
from pipedit.cli import main
from pipedit.device_time import MatmulRate
from pipedit.errors import UserInputError
from pipedit.planner.cost import block_work, step_from_block
from pipedit.planner.models import ModelSpec, full_size

# hidden 8 = 2 heads x 4, MLP 4x, 3 text tokens
TINY = ModelSpec("tiny", "tiny", hidden=8, heads=2, head_dim=4, dual_layers=0, single_layers=2, mlp_ratio=4.0,
                 text_tokens=3, cross_attention=False)


def test_block_flops_match_a_hand_count():
    s, t, d = 5, 3, 8
    joint = block_work(TINY, s)
    # GEMMs per token: Q, K, V, O (4 d^2) + MLP in and out (2 x 4 d^2) = 12 d^2 MACs, 2 FLOPs each, on 8 tokens
    assert joint.linear_flops == 2 * 12 * d * d * (s + t) == 12288
    assert joint.self_attention_flops == 4 * (s + t) ** 2 * d == 2048  # QK^T and PV: 2 N^2 d each
    assert joint.cross_attention_flops == 0
    cross = block_work(replace(TINY, cross_attention=True), s)
    # video tokens: 12 d^2 + cross Q and O (2 d^2); text tokens: cross K and V (2 d^2)
    assert cross.linear_flops == 2 * (12 * d * d * s + 2 * d * d * s + 2 * d * d * t) == 9728
    assert (cross.self_attention_flops, cross.cross_attention_flops) == (4 * s * s * d, 4 * s * t * d) == (800, 480)


def _matmul_attention(q, k, v):  # [B, N, H, D]; torch's FLOP counter does not count SDPA on a CPU
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)


@pytest.mark.parametrize("cross", [False, True])
def test_the_benched_block_does_the_work_the_cost_model_counts(cross):
    spec = replace(TINY, cross_attention=cross)
    block = SpecBlock(spec, torch.device("cpu"), torch.float32)
    block.attend = _matmul_attention
    x, text = torch.randn(1, 5, 8), torch.randn(1, 3, 8)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        block(x, text)
    assert counter.get_total_flops() == block_work(spec, 5).flops


def test_four_full_width_hunyuan_blocks_cannot_take_29_ms_on_an_h200():
    """The figure docs/gpu-nodes.md once gave: 4 blocks at 544x960x33 (18,360 video tokens)."""
    flops = 4 * block_work(full_size("hunyuan-video"), 18_360).flops
    assert 3.3e13 < flops < 3.5e13
    assert flops / 989e12 > 0.034  # seconds at the H200's dense bf16 peak: above 29 ms


def test_a_rate_above_the_measured_matmul_rate_is_a_measurement_error():
    matmul = MatmulRate(100e12, "cuda:0", "bfloat16", 8192)
    fine, impossible = achieved(50e12, 1.0, matmul), achieved(3.4e13, 0.029, matmul)
    assert fine.figures() == {"tflops": 50.0, "of_matmul": 0.5} and "50% of matmul" in fine.text()
    assert impossible.impossible and "MEASUREMENT ERROR" in impossible.text()
    assert set(impossible.figures()) == {"measurement_error"}


def test_a_scaled_cpu_run_reports_each_kernel_and_predicts_the_step(capsys):
    assert main(["bench", "kernels", "--device", "cpu", "--models", "wan-1.3b", "--shapes", "832x480x81",
                 "--tokens", "32", "--width-divisor", "12", "--repeats", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gpu_name"] is None and report["dtype"] == "float32" and report["scaled"]["tokens"] == 32
    assert report["matmul"]["dtype"] == "float32" and report["matmul"]["flops_per_s"] > 0
    kernels = {row["kernel"] for row in report["rows"]}
    assert "sdpa" in kernels and "sdpa-flash" in kernels  # every kernel the table has that runs on a CPU
    spec = replace(full_size("wan-1.3b"), heads=1, hidden=128)
    for row in report["rows"]:
        assert row["video_tokens"] == 32 and row["linear_flops"] == block_work(spec, 32).linear_flops
        assert set(row["block"]) in ({"tflops", "of_matmul"}, {"measurement_error"})
        # 30 dense layers, two CFG forwards
        assert row["predicted_step_s"] == pytest.approx(2 * 30 * row["block_s"])
        assert row["predicted_step_s"] == pytest.approx(step_from_block(spec, row["block_s"], row["attention_s"]))
    with pytest.raises(UserInputError, match="released widths"):
        calibration(report)


def test_the_text_report_labels_a_cpu_and_a_scaled_run(capsys):
    assert main(["bench", "kernels", "--device", "cpu", "--models", "hunyuan-video", "--shapes", "832x480x81",
                 "--tokens", "16", "--width-divisor", "24", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "CPU figures, not a GPU's" in out and "SCALED" in out and "float32 matmul rate on cpu" in out
