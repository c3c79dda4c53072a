"""CFG parallel: two SP groups each run one guidance branch and exchange noise predictions; a
step without guidance (scale <= 1) runs the conditional pass alone on each group, as one rank."""

import pytest
import torch
from cfg_cases import SCALES, ToyCfgAdapter, cfg_worker

from pipedit.config import ParallelConfig
from pipedit.distributed.spawn import run_on_gloo_ranks
from pipedit.errors import UserInputError
from pipedit.runtime.cfg_parallel import check_cfg_capable
from pipedit.runtime.layout import WorldLayout


@pytest.mark.parametrize("ulysses", [1, 2])
def test_groups_exchange_predictions_and_combine_identically(ulysses):
    results = run_on_gloo_ranks(cfg_worker, 2 * ulysses, ulysses, timeout_s=120)
    # Branch g holds ranks g*ulysses .. (g+1)*ulysses - 1, each an SP world of `ulysses` ranks.
    assert [(r["cfg_rank"], r["sp_rank"]) for r in results] == [(g, s) for g in range(2) for s in range(ulysses)]
    assert all(r["sp_world"] == ulysses for r in results)
    # Same result as one rank, bit for bit, on every rank, with guidance and without.
    for scale in SCALES:
        assert all(r["runs"][scale]["equal"] for r in results), scale
        assert all(torch.equal(r["runs"][scale]["pred"], results[0]["runs"][scale]["pred"]) for r in results), scale
    first = results[0]
    guided = first["runs"][7.5]["pred"]
    assert torch.equal(guided, first["unconditional"] + 7.5 * (first["conditional"] - first["unconditional"]))
    # At or below 1: the conditional prediction alone, not uncond + g * (cond - uncond).
    assert torch.equal(first["runs"][1.0]["pred"], first["conditional"])
    assert torch.equal(first["runs"][0.5]["pred"], first["conditional"])
    blended = first["unconditional"] + 0.5 * (first["conditional"] - first["unconditional"])
    assert (blended - first["conditional"]).abs().max() > 0.1  # what the combination would have given
    assert all(r["unguided_equal"] for r in results)
    # Each group runs one pass of one branch per step: its own branch with guidance, the
    # conditional one without (both groups), never the negative one for nothing.
    assert all(r["passes"] == [1, 1, 1, 1] for r in results)


def test_layout_puts_the_branches_side_by_side_before_the_decode_ranks():
    parallel = ParallelConfig(ulysses=2, cfg_parallel=True, decode_ranks=1)
    layout = WorldLayout.from_config(parallel, "dit")
    assert (layout.denoise, layout.world_size, layout.decode_ranks) == (4, 5, (4,))
    assert not layout.aco  # Aco helpers serve a single SP group
    assert parallel.denoise_ranks == 4
    with pytest.raises(UserInputError, match="cfg_parallel"):
        ParallelConfig(cfg_parallel=True, decode_ranks=1, aco="on")
    with pytest.raises(UserInputError, match="cfg_parallel"):
        ParallelConfig(ulysses=2, cfg_parallel=True, ranks=3)
    with pytest.raises(UserInputError, match="--cfg-parallel"):
        ParallelConfig(cfg_parallel=True, decode_ranks="auto", ranks=4)


def test_model_without_cfg_branches_is_refused_with_the_reason(demo_checkpoint):
    from pipedit.adapter import adapter_class_for

    hunyuan = adapter_class_for(demo_checkpoint).from_pretrained(demo_checkpoint, parts=frozenset())
    with pytest.raises(UserInputError, match="no CFG branches"):
        check_cfg_capable(hunyuan)
    check_cfg_capable(ToyCfgAdapter())  # has the seam: accepted
