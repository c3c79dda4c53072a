"""End to end on a tiny OpenSoraPlan model in the official layout: parallel runs (Ray actors,
gloo) against one device, the same seed (noise drawn once from the request's generator on every
rank, whatever the rank count).

The model has 3 heads (2 ranks split them 2+1) and sparse layers 2..5 (single and group skip);
48x80x9 gives 3x3x5 = 45 video tokens (uneven shards, Skiparse padding to 48); the prompt is
padded to 512 tokens. Ulysses and Aco only move data (measured: 0.0 difference). CFG parallel
runs each branch as its own batch-1 forward instead of one batch-2 forward: matmul rounding
differs by ~1e-6 per forward, which guidance (x6) and the sampler carry to ~5e-5 on final latents
of size ~4 (measured on a 4-head variant). The ranks also run another torch thread count than the
driver. With 2 steps the first one starts at sigma_max ~ 4096, where the update cancels numbers
around 4096 |z|: a model output one float32 ulp apart moves that step by one ulp of 4096 (2.4e-4 ..
2e-3), which reaches the final latents divided by sigma_1^2 + 1 ~ 13, i.e. up to ~1.5e-4. So the bound
is the contract's relative one (check-node's): max|diff| <= 1e-4 x max|single-device latents|.
"""

import pytest

from e2e_helpers import Case, generated_latents
from e2e_helpers import single_device_latents as reference_latents
from pipedit.cli import main
from pipedit.integrations.opensora_plan.checkpoint import DEFAULT_TRANSFORMER_FOLDER, TEXT_ENCODER_FOLDER, VAE_FOLDER
from pipedit.integrations.opensora_plan.demo_checkpoint import (
    demo_transformer_config,
    demo_vae_config,
    random_state,
    write_text_encoder,
    write_transformer_folder,
    write_vae_folder,
)
from pipedit.integrations.opensora_plan.transformer import OpenSoraPlanTransformer, TransformerConfig
from pipedit.integrations.opensora_plan.wfvae import WFVAE, WFVAEConfig

PROMPT = "a lighthouse at dusk"
CASE = Case(PROMPT, height=48, width=80, frames=9, steps=2, seed=7)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("osp") / "opensora-plan-3-heads"
    config = demo_transformer_config(num_layers=6, heads=3, head_dim=12)
    dit = OpenSoraPlanTransformer(TransformerConfig.from_dict(config))
    write_transformer_folder(root / DEFAULT_TRANSFORMER_FOLDER, config, random_state(dit, seed=0, std=0.1))
    vae_config = demo_vae_config()
    write_vae_folder(root / VAE_FOLDER, vae_config, random_state(WFVAE(WFVAEConfig.from_dict(vae_config)), seed=1))
    write_text_encoder(root / TEXT_ENCODER_FOLDER)
    return root


@pytest.fixture(scope="module")
def single_device_latents(checkpoint):
    return reference_latents(checkpoint, CASE)


# One representative per path: synchronous Ulysses runs inside the CFG-parallel case, DeDiVAE with
# one denoise rank in tests/integrations/opensora_plan/test_dedivae_one_denoise_rank.py.
FAST = [["--ulysses", "2", "--pipesp-chunk", "1"], ["--decode-ranks", "1", "--aco", "on", "--ulysses", "2"]]
SLOW = [["--cfg-parallel", "--ulysses", "2"], ["--ulysses", "3", "--pipesp-chunk", "1"]]


@pytest.mark.parametrize(
    "flags", FAST + [pytest.param(flags, marks=pytest.mark.slow) for flags in SLOW], ids=lambda flags: " ".join(flags)
)
def test_parallel_latents_equal_single_device(ray_session, checkpoint, single_device_latents, tmp_path, flags):
    latents = generated_latents(checkpoint, tmp_path, CASE, flags)
    assert latents.shape == single_device_latents.shape == (1, 8, 3, 6, 10)
    assert single_device_latents.abs().max().item() > 0.1
    assert (latents - single_device_latents).abs().max().item() <= 1e-4 * single_device_latents.abs().max().item()


def test_cfg_parallel_refused_for_a_model_without_cfg_branches(demo_checkpoint, tmp_path, capsys):
    code = main(["generate", "--prompt", PROMPT, "--model-path", str(demo_checkpoint), "--steps", "1",
                 "--output", str(tmp_path / "out.mp4"), "--cfg-parallel"])
    assert code == 2
    assert "no CFG branches" in capsys.readouterr().err
