"""LTX-2 transformer forward under sequence parallelism equals diffusers' single-device forward
(gloo ranks on CPU; 45 video tokens sharded unevenly, the sound whole on every rank, a CFG-sized
batch of 2 with one padded prompt). Ulysses and Aco only move data; Ring and the video-to-audio
attention merge softmax statistics across ranks; the rest is float reordering inside attention:
1e-5 relative to outputs of size ~1-10."""

import pytest
from ltx2_parallel_cases import LAYERS, forward_worker

from pipedit.distributed.spawn import run_on_gloo_ranks

RTOL = 1e-5
CASES = [  # world, ulysses, ring, options, aco, version, per-token timesteps (i2v), guidance pass
    (2, 2, 1, {"chunk_heads": 1}, False, "2.0", True, None),
    (2, 1, 2, {}, False, "2.3", False, None),
    (4, 2, 2, {}, False, "2.0", False, "stg"),
    (3, 2, 1, {"chunk_heads": 1}, True, "2.3", True, "isolated"),
    (2, 2, 1, {}, False, "2.3", False, "stg"),
]
IDS = ["ulysses 2 pipesp 1 i2v", "ring 2 ltx-2.3", "usp 2x2 stg", "aco 2+1 ltx-2.3 i2v isolated",
       "ulysses 2 ltx-2.3 stg"]


@pytest.mark.parametrize("world,ulysses,ring,options,aco,version,per_token,guidance_pass", CASES, ids=IDS)
def test_parallel_forward_equals_diffusers(world, ulysses, ring, options, aco, version, per_token, guidance_pass):
    results = run_on_gloo_ranks(forward_worker, world, ulysses, ring, options, aco, version, per_token,
                                guidance_pass, timeout_s=180)
    for rank in range(ulysses * ring):
        res = results[rank]
        assert res["routed"] == LAYERS  # every video self-attention through the strategy
        for stream in ("video", "audio"):
            assert res[f"{stream}_scale"] > 0.5 and res[f"{stream}_err"] <= RTOL * res[f"{stream}_scale"], res
