"""DeDiVAE on OpenSoraPlan with one denoise rank (Ray actors, gloo): the decode rank receives
the latents point to point and decodes them; the result equals the single-device run.

Tolerances: latents within 1e-4 relative to their largest value (the same math, but the ranks and
the driver run with different torch thread counts, so CPU reductions may sum in another order; the
first of the 2 steps starts at sigma_max ~ 4096, where one float32 ulp of the update is 2.4e-4..2e-3
and reaches the final latents divided by ~13: see test_opensora_plan_parallel_e2e). Frames within one
quantization level, 1/255: the release truncates frames to uint8, and a pixel whose value sits on a
level boundary moves a whole level when its float differs by 1e-7. Both thread splits are run
(driver 1 and ranks 2, driver 2 and ranks 1), so no machine's one split decides the result."""

import pytest
import torch

from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from pipedit.runtime.rank import CPU_THREADS_ENV

LATENT_TOLERANCE = 1e-4  # relative to max |single-device latents|
FRAME_TOLERANCE = 1 / 255 + 1e-6  # one uint8 level, plus float32 rounding of the level itself


@pytest.fixture(params=[(1, 2), (2, 1)], ids=["driver1-ranks2", "driver2-ranks1"])
def thread_split(request, monkeypatch):
    driver, ranks = request.param
    monkeypatch.setenv(CPU_THREADS_ENV, str(ranks))  # handed to the rank actors by the executor
    before = torch.get_num_threads()
    torch.set_num_threads(driver)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.slow
def test_decode_rank_equals_single_device(ray_session, osp_demo, thread_split):
    request = VideoRequest("a cat", height=32, width=48, num_frames=9, steps=2, seed=3)
    model = ModelConfig(path=str(osp_demo), name="opensora-plan")
    with Engine(EngineConfig(model=model)) as engine:
        single = engine.generate(request)
    parallel = ParallelConfig(decode_ranks=1, aco="off")
    with Engine(EngineConfig(model=model, parallel=parallel)) as engine:
        threads = engine.executor.call_all("torch_threads")
        dedivae = engine.generate(request)
    assert threads == [thread_split[1]] * 2
    assert dedivae.frames.shape == (9, 32, 48, 3)
    assert (dedivae.latents - single.latents).abs().max().item() <= LATENT_TOLERANCE * single.latents.abs().max().item()
    assert (dedivae.frames - single.frames).abs().max().item() <= FRAME_TOLERANCE
