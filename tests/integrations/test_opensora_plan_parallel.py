"""OpenSoraPlan transformer forward under sequence parallelism equals the single-device forward
(gloo ranks on CPU; tiny config with Skiparse layers, text padding, uneven token and head
shards). Ulysses only moves data, so differences are float reordering inside SDPA when heads are
batched differently, plus boolean vs additive (-1e4) key masks: 1e-5 on outputs of size ~1."""

import pytest
import torch
from osp_parallel_cases import HEADS, LAYERS, forward_worker, tiny_model

from pipedit.distributed.spawn import run_on_gloo_ranks
from pipedit.errors import UserInputError
from pipedit.integrations.opensora_plan.parallel import VideoKeys, enable_sequence_parallel
from pipedit.integrations.opensora_plan.skiparse import SparseLayout

ATOL = 1e-5


@pytest.mark.parametrize(
    "world,ulysses,options,aco",
    [(2, 2, {}, False), (2, 2, {"chunk_heads": 1}, False), (3, 3, {"chunk_heads": 1}, False),
     (2, 1, {}, True), (3, 2, {"chunk_heads": 1}, True)],
    ids=["ulysses 2", "ulysses 2 pipesp 1", "ulysses 3 (3 heads, 45 tokens)", "aco 1+1", "aco 2+1"],
)
def test_parallel_forward_equals_single_device(world, ulysses, options, aco):
    results = run_on_gloo_ranks(forward_worker, world, ulysses, options, aco, timeout_s=180)
    for rank in range(ulysses):
        res = results[rank]
        assert res["routed"] == LAYERS  # every self-attention goes through the strategy; cross-attention is local
        assert res["scale"] > 0.1 and res["err"] <= ATOL, res


def test_video_keys_mask_marks_skiparse_padding_and_masked_tokens():
    sparse = SparseLayout(4, group=True)
    valid = torch.ones(1, 13, dtype=torch.bool)
    valid[0, 5] = False
    keys = VideoKeys(sparse, valid)
    mask = keys.key_mask(1, 13, torch.device("cpu"))
    positions = sparse.regroup(torch.arange(16, dtype=torch.float32)[None, :, None]).squeeze(-1)
    expected = (positions < 13) & (positions != 5)
    assert torch.equal(mask, expected)
    assert VideoKeys(sparse, None).key_mask(1, 16, torch.device("cpu")) is None  # nothing to mask
    assert VideoKeys(None, None).regroup(positions) is positions


def test_ring_is_refused_for_skiparse_layers():
    class Ctx:
        ring_degree, world_size = 2, 2

    with pytest.raises(UserInputError, match="--ulysses 2 --ring 1"):
        enable_sequence_parallel(tiny_model(), Ctx(), strategy=None)
    assert HEADS == 3
