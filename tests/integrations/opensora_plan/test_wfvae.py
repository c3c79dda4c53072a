"""WFVAE: official merged.ckpt variants load; decode is deterministic with 4(T-1)+1 frames at
8x the latent size; the causal temporal tiling equals the untiled decode for odd latent T
(exactly: the chunks see the same causal context), as the facts sheet says."""

import pytest
import torch

from pipedit.errors import ModelPathError
from pipedit.integrations.opensora_plan.demo_checkpoint import demo_vae_config, random_state, write_vae_folder
from pipedit.integrations.opensora_plan.wfvae import WFVAE, WFVAEConfig, load_wfvae


def _write(folder, connect: int, variant: str, seed: int = 0, drop_haar: bool = False):
    config = demo_vae_config(connect)
    state = random_state(WFVAE(WFVAEConfig.from_dict(config)), seed=seed, std=0.1)
    if drop_haar:
        state = {k: v for k, v in state.items() if "wavelet_transform" not in k}
    if variant == "gen_model":
        folder.mkdir(parents=True)
        import json

        (folder / "config.json").write_text(json.dumps(config))
        torch.save({"state_dict": {"gen_model": state}}, folder / "merged.ckpt")
    else:
        write_vae_folder(folder, config, state, ema=variant == "ema")
    return state


def _latents(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 8, frames, 4, 6, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("connect", [1, 2])
def test_decode_is_deterministic_with_the_documented_size(tmp_path, connect):
    _write(tmp_path / "vae", connect, "state_dict")
    vae = load_wfvae(tmp_path / "vae")
    assert len(vae.decoder.connect_l1) == connect + 1  # k residual blocks + the Conv2d
    z = _latents(3)
    first, second = vae.decode(z), vae.decode(z)
    assert first.shape == (1, 3, 4 * (3 - 1) + 1, 8 * 4, 8 * 6)
    assert torch.equal(first, second)
    assert torch.isfinite(first).all() and first.std() > 0


def test_every_checkpoint_variant_loads_the_same_weights(tmp_path):
    """ema_state_dict ("module." prefixed), state_dict, state_dict.gen_model, and a state dict
    without the fixed Haar constants all give the same decoder."""
    outputs = []
    for variant in ("state_dict", "ema", "gen_model"):
        _write(tmp_path / variant, 2, variant, seed=4)
        outputs.append(load_wfvae(tmp_path / variant).decode(_latents(2)))
    _write(tmp_path / "no_haar", 2, "state_dict", seed=4, drop_haar=True)
    outputs.append(load_wfvae(tmp_path / "no_haar").decode(_latents(2)))
    for other in outputs[1:]:
        assert torch.equal(outputs[0], other)
    _write(tmp_path / "other_seed", 2, "state_dict", seed=5)
    assert not torch.equal(outputs[0], load_wfvae(tmp_path / "other_seed").decode(_latents(2)))


def test_a_checkpoint_of_another_config_is_refused_by_name(tmp_path):
    _write(tmp_path / "vae", 2, "state_dict")
    config_file = tmp_path / "vae" / "config.json"
    config_file.write_text(config_file.read_text().replace('"connect_res_layer_num": 2', '"connect_res_layer_num": 1'))
    with pytest.raises(ModelPathError, match="unexpected.*connect_l"):
        load_wfvae(tmp_path / "vae")


@pytest.mark.parametrize("frames", [3, 5])
def test_tiled_decode_equals_untiled_for_odd_latent_frames(tmp_path, frames):
    _write(tmp_path / "vae", 2, "state_dict")
    vae = load_wfvae(tmp_path / "vae", dtype=torch.float64)
    z = _latents(frames).double()
    untiled = vae.decode(z, tiled=False)
    tiled = vae.decode(z, tiled=True)
    assert tiled.shape == untiled.shape
    assert (tiled - untiled).abs().max().item() < 1e-12
    assert torch.equal(vae.decode(z, tiled=False), untiled)  # tiling leaves no state behind


def test_tiled_decode_differs_for_even_latent_frames_and_needs_three(tmp_path):
    """Documented behaviour of the official causal cache, kept: even T is not exact."""
    _write(tmp_path / "vae", 2, "state_dict")
    vae = load_wfvae(tmp_path / "vae", dtype=torch.float64)
    z = _latents(4).double()
    assert (vae.decode(z, tiled=True) - vae.decode(z, tiled=False)).abs().max().item() > 1e-3
    with pytest.raises(ValueError, match="at least 3 latent frames"):
        vae.decode(_latents(2), tiled=True)


def test_encoder_gives_latents_of_the_decoder_shape(tmp_path):
    _write(tmp_path / "vae", 2, "state_dict")
    vae = load_wfvae(tmp_path / "vae", with_encoder=True)
    video = torch.rand(1, 3, 9, 32, 48, generator=torch.Generator().manual_seed(1)) * 2 - 1
    latents = vae.encode(video)
    assert latents.shape == (1, 8, 3, 4, 6)
    assert vae.decode(latents).shape == video.shape
    assert load_wfvae(tmp_path / "vae", with_encoder=False).encoder is None


def test_mid_block_attention_in_frame_chunks_equals_all_frames_at_once(tmp_path, monkeypatch):
    """The mid block's attention runs a few frames per call (bounded score memory). Frames attend
    only within themselves, so one frame per call must decode the same video as all at once;
    allowed: float rounding of a kernel that blocks its work by batch size (1e-6 of the peak)."""
    from pipedit.integrations.opensora_plan import wfvae_blocks

    _write(tmp_path / "vae", 2, "state_dict")
    vae = load_wfvae(tmp_path / "vae")
    z = _latents(5)
    assert wfvae_blocks.frames_per_attention_call(4 * 6) >= 5  # the demo: every frame in one call
    whole = vae.decode(z)
    monkeypatch.setattr(wfvae_blocks, "ATTENTION_SCORE_BUDGET_BYTES", 4 * (4 * 6) ** 2)
    assert wfvae_blocks.frames_per_attention_call(4 * 6) == 1
    chunked = vae.decode(z)
    assert (chunked - whole).abs().max() <= 1e-6 * whole.abs().max()
    # 720p: 90x160 latent tokens per frame, 0.8 GiB of float32 scores each: two frames per call.
    monkeypatch.undo()
    assert wfvae_blocks.frames_per_attention_call(90 * 160) == 2
