"""On one GPU: bf16 generation against the CPU float32 result, the attention kernel the hot path
uses, and per-step time at full width (printed; run with -s to see the figures).

Tolerance: bf16 keeps 8 mantissa bits (relative rounding ~4e-3 per op); over a few steps of a
4-block model the latents drift by ~1e-2 relative to their largest value, so 5e-2 bounds
rounding while still catching a wrong layout or mask (those give errors of order 1).
"""

import time

import pytest
import torch

from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
BF16_TOLERANCE = 5e-2


def _generate(path, device: str, dtype: str, request: VideoRequest):
    with Engine(EngineConfig(model=ModelConfig(path=str(path), device=device, dtype=dtype))) as engine:
        result = engine.generate(request)
        processors = getattr(engine.executor.worker.adapter.transformer, "attn_processors", {}).values()
        kernels = [p.strategy.kernel.calls for p in processors if hasattr(p, "strategy")]
    calls = {}
    for counter in kernels:
        for name, count in counter.items():
            calls[name] = calls.get(name, 0) + count
    return result, calls


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def _bf16_against_cpu(label: str, path, video: VideoRequest):
    """(the bf16 CUDA result, the fp32 CPU result, the GPU's attention kernel calls); prints the
    relative max latent difference and asserts it is within BF16_TOLERANCE."""
    gpu, calls = _generate(path, "cuda", "bfloat16", video)
    cpu, _ = _generate(path, "cpu", "float32", video)
    error = _relative(gpu.latents, cpu.latents)
    print(f"\n{label}: bf16 cuda vs fp32 cpu, relative max diff {error:.2e}; attention kernels {calls}")
    assert error <= BF16_TOLERANCE
    return gpu, cpu, calls


@pytest.mark.parametrize("model", ["demo", "full-width"])
def test_bf16_on_gpu_matches_cpu_float32(model, demo_checkpoint, request):
    path = demo_checkpoint if model == "demo" else request.getfixturevalue("full_width_checkpoint")
    video = VideoRequest("a red fox running through fresh snow", height=64, width=64, num_frames=5, steps=3, seed=1)
    _, _, calls = _bf16_against_cpu(model, path, video)
    assert "sdpa-masked" not in calls  # padded text was dropped: the unmasked kernels ran
    assert sum(calls.values()) > 0


def test_opensora_plan_bf16_on_gpu_matches_cpu_float32(osp_demo):
    """OpenSoraPlan's tiny demo (masked cross-attention, Skiparse) in bf16 on the GPU."""
    video = VideoRequest("a cat", height=32, width=48, num_frames=9, steps=3, seed=1)
    gpu, cpu, _ = _bf16_against_cpu("opensora-plan demo", osp_demo, video)
    assert gpu.frames.shape == cpu.frames.shape == (9, 32, 48, 3)


@pytest.mark.parametrize("model", ["wan", "hunyuan-video-1.5"])
def test_other_families_bf16_on_gpu_match_cpu_float32(model, tmp_path):
    """The tiny Wan2.1 and HunyuanVideo 1.5 demos in bf16 on the GPU (their attention and
    rotary code on CUDA), written by `pipedit demo-checkpoint`."""
    from pipedit.cli import main

    assert main(["demo-checkpoint", "--model", model, str(tmp_path / model)]) == 0
    video = VideoRequest("a red fox running through fresh snow", height=48, width=80, num_frames=5, steps=3, seed=1)
    gpu, cpu, _ = _bf16_against_cpu(f"{model} demo", tmp_path / model, video)
    assert gpu.frames.shape == cpu.frames.shape == (5, 48, 80, 3)


def test_full_width_step_time(full_width_checkpoint):
    """Per-step time of the full-width DiT (2+2 blocks) at 544x960x33 (18,360 video tokens)."""
    video = VideoRequest("a red fox running through fresh snow", height=544, width=960, num_frames=33, steps=4)
    with Engine(EngineConfig(model=ModelConfig(path=str(full_width_checkpoint), device="cuda"))) as engine:
        engine.generate(video)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = engine.generate(video)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**30
    per_step = result.timings["denoise_s"] / video.steps
    print(f"\nfull width 544x960x33: {per_step * 1e3:.1f} ms/step (4 blocks), whole request "
          f"{time.perf_counter() - start:.1f} s, peak {peak:.1f} GiB")
    assert torch.isfinite(result.latents).all()
