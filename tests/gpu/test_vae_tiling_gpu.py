"""The released HunyuanVideo VAE config (random weights) decoding in bfloat16 on one GPU.

The 720p test holds the decision fixed on any GPU size: it first takes GPU memory until what is
left free is the predicted untiled peak (as on a decode rank whose GPU also holds the text
encoders), where an untiled decode would not fit with auto's safety margin, so auto must tile;
the tiled decode must then stay under PEAK_LIMIT. Peaks are torch.cuda.max_memory_allocated
above the memory allocated just before the decode.
"""

import json

import pytest
import torch

from pipedit.adapter import VideoShape, load_adapter
from pipedit.integrations.hunyuan_video.vae_memory import free_device_bytes, predict_decode_peak_bytes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]

GIB = 2**30
PEAK_LIMIT = 40 * GIB


@pytest.fixture(scope="module")
def released_vae_checkpoint(tmp_path_factory):
    """A checkpoint folder holding only what a VAE-only adapter reads: the VAE with diffusers'
    default (released) config, the scheduler, and the transformer's config."""
    from diffusers import AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler

    root = tmp_path_factory.mktemp("released-vae")
    torch.manual_seed(0)
    AutoencoderKLHunyuanVideo().to(torch.bfloat16).save_pretrained(root / "vae")
    FlowMatchEulerDiscreteScheduler(shift=7.0).save_pretrained(root / "scheduler")
    (root / "transformer").mkdir()
    (root / "transformer" / "config.json").write_text(json.dumps({"in_channels": 16, "patch_size": 2}))
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "HunyuanVideoPipeline", "vae": ["diffusers", "AutoencoderKLHunyuanVideo"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "transformer": ["diffusers", "HunyuanVideoTransformer3DModel"],
    }))
    return root


def _decode_peak(adapter, latents) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    frames = adapter.decode(latents)
    torch.cuda.synchronize()
    assert torch.isfinite(frames).all()
    return torch.cuda.max_memory_allocated() - before


def test_720p_auto_tiles_when_untiled_does_not_fit_and_stays_under_40_gib(released_vae_checkpoint):
    adapter = load_adapter(released_vae_checkpoint, parts={"vae"}, device="cuda", dtype=torch.bfloat16,
                           vae_tiling="auto")
    latents = adapter.prepare_latents(VideoShape(720, 1280, 129), torch.Generator("cpu").manual_seed(0))
    predicted = predict_decode_peak_bytes(adapter.vae_config, latents.shape, torch.bfloat16)
    free = free_device_bytes("cuda")
    if free < PEAK_LIMIT:
        pytest.skip(f"needs {PEAK_LIMIT / GIB:.0f} GiB free on the GPU, has {free / GIB:.1f} GiB")
    taken = torch.empty(max(0, free - predicted), dtype=torch.uint8, device="cuda")
    peak = _decode_peak(adapter, latents)
    del taken
    assert adapter.vae.use_tiling, "auto should tile: the untiled prediction exceeds the safety share of free memory"
    assert peak < PEAK_LIMIT, f"tiled 720x1280x129 decode peaked at {peak / GIB:.1f} GiB"


def test_untiled_peak_stays_within_the_prediction(released_vae_checkpoint):
    """The predictor was calibrated on CPU; this checks its bound where the convolutions run on
    cuDNN. 480x848 keeps every activation under 2**31 elements."""
    adapter = load_adapter(released_vae_checkpoint, parts={"vae"}, device="cuda", dtype=torch.bfloat16,
                           vae_tiling="off")
    latents = adapter.prepare_latents(VideoShape(480, 848, 129), torch.Generator("cpu").manual_seed(0))
    predicted = predict_decode_peak_bytes(adapter.vae_config, latents.shape, torch.bfloat16)
    if free_device_bytes("cuda") < predicted:
        pytest.skip(f"needs the predicted {predicted / GIB:.1f} GiB free on the GPU")
    peak = _decode_peak(adapter, latents)
    assert not adapter.vae.use_tiling
    assert peak <= predicted, f"untiled peak {peak / GIB:.2f} GiB > predicted {predicted / GIB:.2f} GiB"
