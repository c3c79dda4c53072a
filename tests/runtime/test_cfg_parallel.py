"""CFG parallel: two SP groups each run one guidance branch and exchange noise predictions."""

import pytest
import torch
from cfg_cases import ToyCfgAdapter, cfg_worker

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
    # Same combination as the single-device CFG, bit for bit, on every rank.
    assert all(r["equal"] for r in results)
    assert all(torch.equal(r["pred"], results[0]["pred"]) for r in results)


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
