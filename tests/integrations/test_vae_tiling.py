"""vae_tiling: the untiled-peak predictor, the auto/on/off decision, and the adapter's decode."""

import math

import pytest
import torch

from pipedit.adapter import VideoShape, load_adapter
from pipedit.errors import UserInputError
from pipedit.integrations.hunyuan_video import vae_memory
from pipedit.integrations.hunyuan_video.vae_memory import predict_decode_peak_bytes, should_tile

# The released HunyuanVideo VAE (diffusers' AutoencoderKLHunyuanVideo defaults) and the demo's.
RELEASED = {"block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "latent_channels": 16,
            "out_channels": 3, "spatial_compression_ratio": 8, "temporal_compression_ratio": 4,
            "mid_block_add_attention": True}
DEMO = {**RELEASED, "block_out_channels": [8, 8, 8, 8], "layers_per_block": 1}
GIB = 2**30


def _latents(height, width, frames, batch=1):
    return (batch, 16, (frames - 1) // 4 + 1, height // 8, width // 8)


# -- should_tile ----------------------------------------------------------------------------
@pytest.mark.parametrize("predicted,free", [(1, 10 * GIB), (80 * GIB, 10 * GIB)])
def test_on_and_off_ignore_memory(predicted, free):
    for device in ("cpu", "cuda:0"):
        assert should_tile("on", device, predicted, free) is True
        assert should_tile("off", device, predicted, free) is False


def test_auto_never_tiles_on_cpu():
    assert should_tile("auto", "cpu", 10**15, None) is False
    assert should_tile("auto", torch.device("cpu"), 10**15, 1) is False


def test_auto_on_cuda_tiles_iff_the_prediction_does_not_fit():
    free = 40 * GIB
    limit = vae_memory.SAFETY_FRACTION * free
    assert should_tile("auto", "cuda", int(limit) + 1, free) is True
    assert should_tile("auto", "cuda:1", int(limit) - 1, free) is False
    assert should_tile("auto", torch.device("cuda", 0), 2 * free, free) is True
    assert should_tile("auto", "cuda", GIB, free) is False


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(UserInputError, match="vae_tiling must be one of auto, on, off"):
        should_tile("sometimes", "cpu", 0, None)


# -- predictor ------------------------------------------------------------------------------
def test_prediction_by_hand_demo_config():
    # latents 32x32x9: one pass of 3 latent frames on a 4x4 grid. The decoder grows it to
    # 8 ch x 3 x 8x8, then 8 x 5 x 16x16, then 8 x 9 x 32x32 (largest), output 3 x 9 x 32x32.
    largest = 8 * 9 * 32 * 32
    convolutions = vae_memory.ACTIVATION_FACTOR * largest * 4
    mask = (3 * 4 * 4) ** 2 * 5 + vae_memory.ACTIVATION_FACTOR * 8 * 3 * 4 * 4 * 4  # bool + float32 per entry
    held = 3 * 9 * 32 * 32 * 4
    assert mask < convolutions
    assert predict_decode_peak_bytes(DEMO, _latents(32, 32, 9), torch.float32) == int(convolutions + held)


def test_prediction_by_hand_720p_bfloat16():
    # 33 latent frames decode in 11 passes of 5 (stride 3); a pass is 17 frames at full size.
    largest = 256 * 17 * 720 * 1280  # up block 3's input: 256 channels, full resolution
    tokens = 5 * 90 * 160
    mask = tokens**2 * (4 + 2) + vae_memory.ACTIVATION_FACTOR * 512 * tokens * 2  # float32 `where` + bf16 copy
    held = 3 * (11 * 17 + 129) * 720 * 1280 * 2
    expected = max(vae_memory.ACTIVATION_FACTOR * largest * 2, mask) + held
    assert predict_decode_peak_bytes(RELEASED, _latents(720, 1280, 129), torch.bfloat16) == int(expected)


def test_prediction_by_hand_1080p_bfloat16_is_mask_bound():
    # The mask is quadratic in a pass's tokens: at 1088x1920 it outgrows the convolutions.
    tokens = 5 * 136 * 240
    mask = tokens**2 * (4 + 2) + vae_memory.ACTIVATION_FACTOR * 512 * tokens * 2
    largest = 256 * 17 * 1088 * 1920
    held = 3 * (11 * 17 + 129) * 1088 * 1920 * 2
    assert mask > vae_memory.ACTIVATION_FACTOR * largest * 2
    assert predict_decode_peak_bytes(RELEASED, _latents(1088, 1920, 129), torch.bfloat16) == int(mask + held)


def test_prediction_grows_with_the_shape():
    def predict(height, width, frames, batch=1, dtype=torch.bfloat16):
        return predict_decode_peak_bytes(RELEASED, _latents(height, width, frames, batch), dtype)

    assert predict(128, 128, 9) < predict(256, 128, 9) < predict(256, 256, 9) < predict(512, 512, 9)
    assert predict(256, 256, 5) < predict(256, 256, 9) < predict(256, 256, 17)
    # Beyond one framewise pass only the held output frames grow: 8x the frames, far less memory.
    assert predict(256, 256, 17) < predict(256, 256, 129) < 1.5 * predict(256, 256, 17)
    # Convolution-bound sizes scale with the area.
    assert math.isclose(predict(512, 512, 9) / predict(256, 256, 9), 4, rel_tol=0.05)
    assert predict(256, 256, 9, batch=2) > 1.9 * predict(256, 256, 9)
    assert predict(256, 256, 9, dtype=torch.float32) > 1.9 * predict(256, 256, 9)


# -- the adapter ----------------------------------------------------------------------------
SHAPE = VideoShape(height=128, width=128, num_frames=9)


@pytest.fixture(scope="module")
def latents(demo_checkpoint):
    adapter = load_adapter(demo_checkpoint, parts={"vae"})
    return adapter.prepare_latents(SHAPE, torch.Generator("cpu").manual_seed(5))


def _decode(demo_checkpoint, mode, latents, tile=None):
    """Frames and the number of decoder forwards (temporal passes x spatial tiles)."""
    adapter = load_adapter(demo_checkpoint, parts={"vae"}, vae_tiling=mode)
    if tile:  # smaller tiles than diffusers' 256 px, so that a 128 px video is split
        adapter.vae.enable_tiling(tile_sample_min_height=tile, tile_sample_min_width=tile,
                                  tile_sample_stride_height=tile * 3 // 4, tile_sample_stride_width=tile * 3 // 4)
        adapter.vae.disable_tiling()
    calls = []
    adapter.vae.decoder.register_forward_pre_hook(lambda *_: calls.append(1))
    frames = adapter.decode(latents)
    return adapter, frames, len(calls)


def _diffusers_frames(demo_checkpoint, latents):
    from diffusers import AutoencoderKLHunyuanVideo

    vae = AutoencoderKLHunyuanVideo.from_pretrained(demo_checkpoint / "vae")
    with torch.no_grad():
        video = vae.decode(latents / vae.config.scaling_factor, return_dict=False)[0]
    return (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1)


def test_on_runs_diffusers_tiled_decode(demo_checkpoint, latents):
    tiled, frames_on, calls_on = _decode(demo_checkpoint, "on", latents, tile=96)
    untiled, frames_off, calls_off = _decode(demo_checkpoint, "off", latents, tile=96)
    assert tiled.vae.use_tiling and not untiled.vae.use_tiling
    # 16x16 latents, 12-latent tiles every 9: 2 x 2 tiles in the one temporal pass.
    assert (calls_on, calls_off) == (4, 1)
    # Frames in [0, 1]. Each tile sees only its own latents and the demo's random weights make
    # the seams plain (measured: mean 0.042, max 0.48), yet the tiled frames stay far closer to
    # the untiled ones than untiled frames of other latents are (mean 0.145).
    difference = (frames_on - frames_off).abs()
    other = untiled.decode(untiled.prepare_latents(SHAPE, torch.Generator("cpu").manual_seed(6)))
    assert 0 < difference.mean().item() <= 0.05
    assert difference.max().item() <= 0.6
    assert difference.mean().item() < (other - frames_off).abs().mean().item() / 2


def test_off_and_cpu_auto_equal_diffusers_default_decode(demo_checkpoint, latents):
    reference = _diffusers_frames(demo_checkpoint, latents)
    for mode in ("off", "auto"):
        adapter, frames, calls = _decode(demo_checkpoint, mode, latents, tile=96)
        assert not adapter.vae.use_tiling and calls == 1
        assert torch.equal(frames, reference), mode


def test_mode_is_checked_when_the_adapter_is_made(demo_checkpoint):
    with pytest.raises(UserInputError, match="vae_tiling must be one of"):
        load_adapter(demo_checkpoint, parts={"vae"}, vae_tiling="yes")
