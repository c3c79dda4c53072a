"""`bench latency --base-offload` on one GPU: the sequential baseline keeps the VAE on the host
while denoising and the DiT while decoding, and the video is the one without offload.

Tolerance: the same bf16 kernels run on the same GPU with the same inputs either way (only the
modules' residence between phases differs), so frames in [0, 1] agree to 1e-2 unless a module
came back wrong (a wrong or missing move gives errors of order 1 or a device error)."""

import pytest
import torch

from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_offloaded_baseline_matches_and_moves_modules(demo_checkpoint):
    request = VideoRequest("a red fox running through fresh snow", height=64, width=64, num_frames=5, steps=2)
    with Engine(EngineConfig(model=ModelConfig(path=str(demo_checkpoint), device="cuda"))) as engine:
        plain = engine.generate(request)
        assert engine.executor.call("set_offload_idle", True) == [True]
        components = engine.executor.worker.adapter.components
        assert next(components["vae"].parameters()).device.type == "cpu"
        offloaded = engine.generate(request)
        assert next(components["vae"].parameters()).device.type == "cpu"
        assert next(components["transformer"].parameters()).device.type == "cuda"
    assert torch.allclose(offloaded.frames, plain.frames, atol=1e-2)
