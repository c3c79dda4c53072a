"""The planner's LTX-2 (pipedit.integrations.ltx2.planner, .release): parameter counts from the released
configs against the released files' sizes, the audio stream's FLOPs (ModelSpec.side_stream), the
shipped 8-GPU config's memory per rank, the decode's peak against diffusers' decode on fake tensors,
and a checkpoint's configs read back."""

import re
from dataclasses import replace

import pytest
import torch

from pipedit.config import load_config
from pipedit.integrations.ltx2 import release
from pipedit.planner.cost import Shape, side_stream_work, step_work
from pipedit.planner.memory import decode_rank_bytes, denoise_rank_bytes, vae_decode_peak_bytes
from pipedit.planner.models import from_checkpoint, full_size

GIB = 1024 ** 3
DEFAULT = Shape(512, 768, 121)  # LTX2Pipeline's default size: 16 x 16 x 24 = 6144 video tokens, 126 audio


def test_parameter_counts_are_the_released_files():
    """Bytes of Lightricks/LTX-2's safetensors (their headers' tensor sizes), over bytes per parameter:
    the DiT in bf16 but its AdaLN tables in float32, 2 x 4096 + 2 x 2048 + 48 x (11 x 4096 + 11 x 2048)
    = 3,256,320 values of 4 bytes; the VAEs' files add 256 buffer values (latents_mean / std, 128 each);
    Gemma 3 12B is stored in float32."""
    components = release.COMPONENTS["ltx-2"]
    assert release.params(components["transformer"]) == (37_758_861_824 - 2 * 3_256_320) / 2  # 18,876,174,592
    assert release.params(components["connectors"]) == 2_862_950_400 / 2
    assert release.params(components["vae"]) == 2_444_959_714 / 2 - 256
    assert release.params(components["audio_vae"]) == 106_496_804 / 2 - 256
    assert release.params(components["vocoder"]) == 111_185_604 / 2
    assert release.gemma_params() == 48_749_300_160 / 4
    ltx23 = release.COMPONENTS["ltx-2.3"]  # "22B": the DiT and the eight-layer connectors
    assert release.params(ltx23["transformer"]) + release.params(ltx23["connectors"]) == pytest.approx(22e9, rel=0.01)


def test_the_released_specs():
    dev, distilled, ltx23 = (full_size(name) for name in ("ltx-2", "ltx-2-distilled", "ltx-2.3"))
    assert (dev.heads, dev.head_dim, dev.layers, dev.text_tokens, dev.cross_attention) == (32, 128, 48, 1024, True)
    assert (dev.cfg_batch, distilled.cfg_batch, ltx23.cfg_batch) == (4, 1, 4)  # CFG's two, STG, modality; guidance 1
    assert dev.video_tokens(512, 768, 121) == 16 * 16 * 24  # 32x spatial, 8x temporal, patch 1
    assert dev.side_stream.tokens(121) == 126  # round(121 frames / 24 fps x 25 latents a second)
    assert dev.text_params == release.gemma_params() + release.params(release.COMPONENTS["ltx-2"]["connectors"])
    assert dev.text_beside_vae and not dev.vae_tiling


def test_the_audio_streams_flops_by_hand():
    """Per block and pass at 768x512x121: S = 6144 video tokens of h = 4096, A = 126 audio tokens of
    a = w = 2048 (the exchange width), T = 1024 text tokens, MLP ratio 4 (2 FLOPs a MAC).
    On the video tokens: a2v's q and o, v2a's k and v: 2 x 4 S h w = 412,316,860,416.
    Between the streams: 2 x 4 S A w (video queries over audio keys, audio queries over video keys)
    = 12,683,575,296. The audio's own: 2 x (A a^2 (6 + 8) + 4 A a w + 2 T a^2) = 2 x 4,194,304 x 4316
    = 36,205,232,128 linear, 4 A^2 a + 4 A T a = 1,187,020,800 attention."""
    model = full_size("ltx-2")
    assert side_stream_work(model, 6144, 121) == (412_316_860_416, 12_683_575_296, 36_205_232_128 + 1_187_020_800)
    with_audio, without = step_work(model, DEFAULT), step_work(replace(model, side_stream=None), DEFAULT)
    assert with_audio.replicated_flops == 4 * 48 * (36_205_232_128 + 1_187_020_800)  # not divided over ranks
    assert with_audio.linear_flops - without.linear_flops == 4 * 48 * 412_316_860_416
    assert with_audio.attention_flops - without.attention_flops == 4 * 48 * 12_683_575_296
    # 14% more linear work than the video stream alone; the audio's own tokens add 1%.
    assert with_audio.linear_flops / without.linear_flops == pytest.approx(1.14, abs=0.01)


def test_the_shipped_8_gpu_config_fits_80_gb_gpus():
    """Ring 7 denoise ranks hold the DiT alone; the decode rank the VAEs, the vocoder, Gemma and the
    connectors. Denoise at 768x512x121, bytes: the DiT 2 x 18,876,174,592 = 37,752,349,184; activations
    4 passes x 2 bytes x (6144 / 7 tokens x 4096 x (3 + 4 + 5) + 126 x 2048 x 7) = 359,589,184;
    1.1 x the sum + 0.6e9 = 42,523,332,578 = 39.60 GiB."""
    config = load_config("configs/ltx2-8gpu.yaml")
    parallel = config.parallel
    assert (parallel.ulysses, parallel.ring, parallel.decode_ranks, parallel.text_encoder) == (1, 7, 1, "vae")
    model = full_size("ltx-2")
    activations = 4 * 2 * (6144 / 7 * 4096 * 12 + 126 * 2048 * 7)
    assert denoise_rank_bytes(model, DEFAULT, 1, 7, False, False, False) == pytest.approx(
        1.1 * (37_752_349_184 + activations) + 0.6e9)
    for shape, denoise, decode in ((DEFAULT, 39.6, 37.9), (Shape(704, 1280, 121), 40.1, 44.0)):
        assert denoise_rank_bytes(model, shape, 1, 7, False, False, False) / GIB == pytest.approx(denoise, abs=0.05)
        assert decode_rank_bytes(model, shape, True, False, True) / GIB == pytest.approx(decode, abs=0.05)


@pytest.mark.parametrize("name, vae", [("ltx-2", release.VAE_20), ("ltx-2.3", release.VAE_23)])
def test_the_decode_peak_bounds_diffusers_decode_on_fake_tensors(name, vae):
    """diffusers' decode of the released VAE at 768x512x121 on fake tensors (the dry run's count): the
    planner's peak (6 x the largest activation) is above it, by less than a third."""
    from pipedit.dryrun.fakeworld import fake_tensors
    from pipedit.dryrun.memory import StorageCounter
    from pipedit.dryrun.models import build_fake

    with fake_tensors():
        module = build_fake(release.component_class(vae["_class_name"]), vae, torch.bfloat16)
        latents = torch.empty(1, 128, 16, 16, 24, dtype=torch.bfloat16)
        with StorageCounter() as counter:
            module.decode(latents, return_dict=False)
    predicted = vae_decode_peak_bytes(full_size(name), DEFAULT, False)
    assert counter.peak < predicted < 1.35 * counter.peak


def test_the_decode_flops_add_the_sound():
    from pipedit.integrations.ltx2.planner import vae_flops

    model = full_size("ltx-2")
    silent = replace(model, side_stream=None)
    video = vae_flops(silent, 512, 768, 121, False)
    assert video == pytest.approx(6.02e13, rel=0.01)  # the video VAE's decode, counted on the meta device
    sound = vae_flops(model, 512, 768, 121, False) - video  # the audio VAE and the vocoder
    assert 0.0 < sound < 0.02 * video


@pytest.mark.parametrize("name", release.RELEASES)
def test_the_released_configs_read_back_as_the_planned_model(tmp_path, name):
    from pipedit.integrations.ltx2.released import write_release

    read = from_checkpoint(write_release(name, tmp_path / name), "ltx-2")
    planned = full_size(name)
    assert replace(read, name=planned.name) == planned  # no weights: the counts of the same configs


def test_the_docs_show_the_planners_figures_for_the_shipped_config():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    model, rows = full_size("ltx-2"), (docs / "models.md").read_text()
    small, large = DEFAULT, Shape(704, 1280, 121)
    denoise = [denoise_rank_bytes(model, shape, 1, 7, False, False, False) / GIB for shape in (small, large)]
    decode = [decode_rank_bytes(model, shape, True, False, True) / GIB for shape in (small, large)]
    # (the dry run's figures beside them are measured by `pipedit dry-run`, minutes on 2 cores: quoted)
    dry = r"\d+\.\d"
    assert re.search(rf"\| denoise \(DiT, Ring 7\) \| {denoise[0]:.1f} GiB \| {dry} GiB \| {denoise[1]:.1f} GiB \|", rows)
    assert re.search(rf"\| decode \+ Gemma 3 12B \+ connectors \| {decode[0]:.1f} GiB \| {dry} GiB \| "
                     rf"{decode[1]:.1f} GiB \|", rows)
    table = (docs / "gpu-nodes.md").read_text()
    assert re.search(rf"\| 768x512x121 \| denoise 0-6 \| {dry} \| {denoise[0]:.1f} \|", table)
    assert re.search(rf"\| 1280x704x121 \| denoise 0-6 \| {dry} \| {denoise[1]:.1f} \|", table)
