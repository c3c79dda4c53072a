"""DeDiVAE on OpenSoraPlan with one denoise rank (Ray actors, gloo): the decode rank receives
the latents point to point and decodes them; latents and frames equal the single-device run
within 1e-4 (the same math; only thread-count-dependent CPU float reordering may differ)."""

import pytest

from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

TOLERANCE = 1e-4


@pytest.mark.slow
def test_decode_rank_equals_single_device(ray_session, osp_demo):
    request = VideoRequest("a cat", height=32, width=48, num_frames=9, steps=2, seed=3)
    model = ModelConfig(path=str(osp_demo), name="opensora-plan")
    with Engine(EngineConfig(model=model)) as engine:
        single = engine.generate(request)
    parallel = ParallelConfig(decode_ranks=1, aco="off")
    with Engine(EngineConfig(model=model, parallel=parallel)) as engine:
        dedivae = engine.generate(request)
    assert dedivae.frames.shape == (9, 32, 48, 3)
    assert (dedivae.latents - single.latents).abs().max().item() <= TOLERANCE
    assert (dedivae.frames - single.frames).abs().max().item() <= TOLERANCE
