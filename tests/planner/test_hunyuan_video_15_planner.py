"""The planner's HunyuanVideo 1.5 (pipedit.integrations.hunyuan_video_15.planner): the released sizes,
a tiny checkpoint's dims read back, the shipped 8-GPU config's per-rank memory at 720p and 480p x 121."""

import pytest

from pipedit.adapter import VideoShape, model_inputs
from pipedit.config import load_config
from pipedit.planner.cost import Shape
from pipedit.planner.memory import decode_rank_bytes, denoise_rank_bytes
from pipedit.planner.models import from_checkpoint, full_size

GIB = 1024 ** 3


def test_the_released_sizes():
    spec = full_size("hunyuan-video-1.5")
    assert spec.dit_params == pytest.approx(8.3e9, rel=0.01)  # the release's "8.3B"
    assert (spec.heads, spec.head_dim, spec.dual_layers, spec.single_layers) == (16, 128, 54, 0)
    assert spec.text_params == pytest.approx(7.07e9 + 0.22e9, rel=0.01)  # Qwen2.5-VL-7B's text model, ByT5-small
    assert full_size("hunyuan-video-1.5-i2v").text_params == pytest.approx(spec.text_params + 0.43e9, rel=0.01)
    assert spec.video_tokens(720, 1280, 121) == 31 * 45 * 80  # 16x spatial, 4x temporal, patch 1


def test_a_checkpoints_dims_and_parameters_are_read_from_its_files(tmp_path):
    from pipedit.integrations.hunyuan_video_15.demo_checkpoint import build_pipeline, write_demo_checkpoint

    root = write_demo_checkpoint(tmp_path / "demo")
    spec = from_checkpoint(root, "hunyuan-video-1.5")
    pipe = build_pipeline()
    assert spec.dit_params == sum(p.numel() for p in pipe.transformer.parameters())
    assert (spec.heads, spec.head_dim, spec.dual_layers, spec.latent_channels) == (2, 16, 2, 8)


def test_the_released_configs_load_as_a_model_that_takes_720p_121(tmp_path):
    from pipedit.integrations.hunyuan_video_15.released import write_release

    inputs = model_inputs(write_release("hunyuan-video-1.5", tmp_path / "release"))
    inputs.validate(VideoShape(720, 1280, 121), 50)
    assert inputs.latent_shape(VideoShape(720, 1280, 121)) == (1, 32, 31, 45, 80)
    assert not inputs.capabilities.image and inputs.capabilities.cfg_parallel


@pytest.mark.parametrize("height, width, denoise_gib", [(720, 1280, 20.5), (480, 848, 18.9)])
def test_the_shipped_8_gpu_config_fits_80_gb_gpus(height, width, denoise_gib):
    """Ulysses 4 denoise ranks hold the DiT alone; the 4 decode ranks the VAE, Qwen2.5-VL and ByT5
    (text_encoder: vae) and decode in 256-pixel tiles (its peak is the tile's, whatever the size).
    Untiled, a 720p decode's dense causal mask and activations would need ~480 GiB."""
    config = load_config("configs/hunyuan-video-15-8gpu.yaml")
    parallel = config.parallel
    assert (parallel.ulysses, parallel.decode_ranks, parallel.text_encoder) == (4, 4, "vae")
    model, shape = full_size("hunyuan-video-1.5"), Shape(height, width, 121)
    denoise = denoise_rank_bytes(model, shape, parallel.ulysses, parallel.ring, False, False, True) / GIB
    decode = decode_rank_bytes(model, shape, True, True, True) / GIB
    assert denoise == pytest.approx(denoise_gib, abs=0.1)
    assert decode == pytest.approx(50.2, abs=0.1)  # with the next request's encode beside a decode (0.8 GiB)
    assert max(denoise, decode) < 75  # the planner's usable share of 80 GB
    assert decode_rank_bytes(model, shape, True, False, True) / GIB > 200

