"""Aco helpers serve every shape of attention call (joint, sparse self-attention, cross-attention,
plain self-attention) within one forward; outputs equal single-device attention within 1e-6 (each
head is the same kernel problem wherever it runs; only how heads are batched differs)."""

import pytest
from aco_call_cases import KINDS, aco_call_worker

from pipedit.distributed.spawn import run_on_gloo_ranks


@pytest.mark.parametrize("denoise,decode,chunk", [(1, 1, None), (2, 1, 1), (3, 1, None)])
def test_aco_serves_every_call_shape(denoise, decode, chunk):
    results = run_on_gloo_ranks(aco_call_worker, denoise + decode, denoise, chunk, timeout_s=120)
    for rank in range(denoise):
        errors = results[rank]["errors"]
        assert set(errors) == set(KINDS)
        assert max(errors.values()) <= 1e-6, errors
    assert any(results[rank]["offloads"] for rank in range(denoise))
    assert all(results[r]["helper_heads"] > 0 for r in range(denoise, denoise + decode))
