"""The split decode's units, in one process: each family's plan, decoded unit by unit and
assembled, against the same VAE's own decode of the same mode (the spawned-rank test,
tests/runtime/test_split_decode_e2e.py, adds the transfers).

Tolerances: HunyuanVideo's plan runs diffusers' own units with the same blending arithmetic in the
same order, in the same process: bitwise equal (torch.equal). WFVAE's bands run the tail's
convolutions on smaller tensors, which CPU kernels may sum in another order: float32 within 1e-6
of the output's peak (the random demo weights reach a few hundred; ~8 float32 ulps there). The
halo check runs in float64, where rounding is ~1e-16 relative: the derived halo is equal within
1e-12 of the peak, one row less is not (the error at the band's edge reaches the kept rows).
"""

import dataclasses
import types

import pytest
import torch

from pipedit.integrations.hunyuan_video.demo_checkpoint import _vae as demo_hunyuan_vae
from pipedit.integrations.hunyuan_video.split_decode import TilePlan
from pipedit.integrations.opensora_plan.demo_checkpoint import demo_vae_config, random_state
from pipedit.integrations.opensora_plan.split_decode import BandPlan, tail_halo
from pipedit.integrations.opensora_plan.wfvae import WFVAE, WFVAEConfig
from pipedit.runtime.split_decode import assign


def _decoded(plan, units):
    return plan.assemble([plan.decode_unit(u) for u in range(units)])


@pytest.fixture(scope="module")
def hunyuan_vae():
    torch.manual_seed(0)
    vae = demo_hunyuan_vae().eval()
    vae.tile_sample_min_height = vae.tile_sample_min_width = 32  # tiles smaller than these frames
    vae.tile_sample_stride_height = vae.tile_sample_stride_width = 24
    return vae


@pytest.mark.parametrize("shape, tiled, units", [
    ((1, 16, 7, 4, 4), False, 3),  # three temporal chunks, whole frames
    ((1, 16, 5, 5, 5), True, 2 * 2 * 2),  # two chunks, 2 x 2 spatial tiles each (stride 3)
    ((1, 16, 3, 9, 5), True, 3 * 2),  # one chunk (few frames): tiles only
    ((1, 16, 3, 4, 4), True, 1),  # one chunk of one tile: nothing to split
])
def test_hunyuan_tiles_equal_diffusers_decode(hunyuan_vae, shape, tiled, units):
    z = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    (hunyuan_vae.enable_tiling if tiled else hunyuan_vae.disable_tiling)()
    with torch.no_grad():
        expected = hunyuan_vae.decode(z, return_dict=False)[0]
        plan = TilePlan(hunyuan_vae, z, tiled)
        assert len(plan.units) == units
        assert [tuple(plan.decode_unit(u).shape) for u in range(units)] == [plan.output_shape(u) for u in range(units)]
        assert torch.equal(_decoded(plan, units), expected)


def _wfvae(norm_type="layernorm", dtype=torch.float32):
    config = WFVAEConfig.from_dict({**demo_vae_config(2), "norm_type": norm_type})
    vae = WFVAE(config, with_encoder=False)
    vae.load_state_dict(random_state(vae, seed=0), strict=False)
    return vae.to(dtype).eval()


@pytest.mark.parametrize("tiled", [False, True], ids=["untiled", "temporally-tiled"])
def test_wfvae_bands_equal_one_decode(tiled):
    vae = _wfvae()
    latents = torch.randn(1, 8, 3, 12, 2, generator=torch.Generator().manual_seed(2))
    expected = vae.decode(latents, tiled=tiled)
    for parts in (2, 3):
        plan = BandPlan(vae, latents, tiled, parts)
        assert [tuple(plan.decode_unit(u).shape) for u in range(parts)] == [plan.output_shape(u) for u in range(parts)]
        assert (_decoded(plan, parts) - expected).abs().max() <= 1e-6 * expected.abs().max()


def test_wfvae_halo_is_the_tails_receptive_field():
    vae = _wfvae(dtype=torch.float64)
    assert tail_halo(vae.config) == 7  # demo: 1 resnet per up block, 2 per connection
    assert tail_halo(dataclasses.replace(vae.config, decoder_num_resblocks=2)) == 10  # the release's
    latents = torch.randn(1, 8, 3, 20, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    expected = vae.decode(latents, tiled=False)
    errors = {}
    for halo in (tail_halo(vae.config), tail_halo(vae.config) - 1):
        errors[halo] = ((_decoded(BandPlan(vae, latents, False, 2, halo), 2) - expected).abs().max()
                        / expected.abs().max()).item()
    assert errors[7] <= 1e-12 < errors[6]


def test_groupnorm_wfvae_is_not_split():
    """GroupNorm normalises over the whole frame after the cut: one band, the plain decode."""
    config = dataclasses.replace(_wfvae().config, norm_type="groupnorm")
    vae = types.SimpleNamespace(config=config, unscaled=lambda latents: latents)
    assert BandPlan(vae, torch.zeros(1, 8, 3, 8, 4), False, 2).bands == [(0, 8)]


def test_units_are_shared_costliest_first_and_deterministically():
    assert assign([5.0, 1.0, 4.0, 2.0], 2) == [0, 0, 1, 1]  # 5 + 1 | 4 + 2
    assert assign([1.0, 1.0, 1.0], 2) == [0, 1, 0]
    assert assign([3.0], 2) == [0]  # fewer units than ranks: the lead decodes
