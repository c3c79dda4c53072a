"""LTX-2 end to end on Ray rank actors (gloo): each parallel layout's joint latents (the video's and
the sound's, one tensor: integrations/ltx2/latents.py) against the same request on one in-process
rank, on tiny checkpoints of the test dims (4 heads: 2 ranks take 2 each). Guidance 4 runs every
pass of a step: CFG's negative and positive, STG and modality isolation.
- Ulysses 2 and Ring 2 over the video tokens, the sound whole on every rank; Ring 2 through
  `pipedit generate --save-latents`, whose file is the dict of the two streams;
- CFG parallel on an image-to-video checkpoint (LTX2ImageToVideoPipeline's layout, with an image):
  the four passes go to the two groups by branch index mod 2, negative + STG on one, positive +
  modality isolation on the other, exchanged every step;
- Ulysses 2 + a decode rank (DeDiVAE) + Aco (the decode rank computes attention heads while it is
  idle): the frames and the sound, decoded on the decode rank, too.

Bounds: the layouts only move data, but they split the attention's and the batch's matmuls
differently from one rank (Ulysses: 2 heads a rank, Ring: online softmax over two key blocks,
CFG parallel: one pass at a time where one rank batches negative with positive), so each forward
may round differently by ~1e-7, which the guidance (x4 video, x7 audio CFG) carries through the
steps: latents within the contract's 1e-4 x max|one-rank latents|. The frames travel as 8-bit
levels (half a level, plus the same 1e-4). The sound (vocoder output in [-1, 1], peak ~0.3 here)
follows the audio latents through the audio VAE and the vocoder on the decode rank: within 1e-4
absolute (measured: latents 2e-6 relative, sound 3e-8).

Aco's helpers serve a step until the denoise ranks end it: an LTX-2 step runs three transformer
passes (the CFG batch, STG, modality isolation) and STG's perturbed block makes no attention call.
"""

import io

import numpy as np
import pytest
import torch

from e2e_helpers import Case, generated_latents
from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.integrations.ltx2.demo_checkpoint import TEST_DIMS, write_demo_checkpoint
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

pytestmark = pytest.mark.slow  # rank groups on Ray, end to end

CASE = Case("a drummer on a rooftop at dusk", height=32, width=96, frames=9, steps=2, seed=5)
FPS, GUIDANCE = 20, 4.0
TOLERANCE = 1e-4
FRAME_TOLERANCE = 0.5 / 255 + TOLERANCE
SOUND_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx2")
    return {preset: write_demo_checkpoint(root / preset, TEST_DIMS, preset=preset) for preset in ("t2v", "i2v")}


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("image") / "first.png"  # another size and aspect than the video
    Image.fromarray((np.random.RandomState(3).rand(30, 70, 3) * 255).astype("uint8")).save(path)
    return path


def _request(image: bytes | None = None) -> VideoRequest:
    return VideoRequest(CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames, steps=CASE.steps,
                        seed=CASE.seed, fps=FPS, guidance_scale=GUIDANCE, image=image)


def _run(checkpoint, request: VideoRequest, parallel: ParallelConfig = ParallelConfig()):
    with Engine(EngineConfig(model=ModelConfig(path=str(checkpoint)), parallel=parallel)) as engine:
        return engine.generate(request)


@pytest.fixture(scope="module")
def one_rank(checkpoints, image_file):
    """The references: text-to-video, and image-to-video on the i2v checkpoint, on one rank."""
    return {"t2v": _run(checkpoints["t2v"], _request()),
            "i2v": _run(checkpoints["i2v"], _request(image_file.read_bytes()))}


def _assert_close(latents: torch.Tensor, reference: torch.Tensor) -> None:
    scale = reference.abs().max().item()
    assert latents.shape == reference.shape and scale > 0.1
    assert (latents - reference).abs().max().item() <= TOLERANCE * scale


def test_ulysses_latents_equal_one_rank(ray_session, checkpoints, one_rank):
    _assert_close(_run(checkpoints["t2v"], _request(), ParallelConfig(ulysses=2)).latents, one_rank["t2v"].latents)


def test_ring_saved_latents_are_both_streams_equal_to_one_rank(ray_session, checkpoints, one_rank, tmp_path):
    from pipedit.adapter import model_inputs

    saved = generated_latents(checkpoints["t2v"], tmp_path, CASE, ["--ring", "2", "--fps", str(FPS),
                                                                   "--guidance-scale", str(GUIDANCE)])
    expected = model_inputs(checkpoints["t2v"]).saved_latents(one_rank["t2v"].latents, _request().shape)
    assert set(saved) == {"latents", "audio_latents"}
    assert saved["latents"].shape[:2] == (1, TEST_DIMS.latent_channels)
    assert saved["audio_latents"].shape[:2] == (1, TEST_DIMS.audio_latent_channels)
    for name, reference in expected.items():
        _assert_close(saved[name], reference)


def test_cfg_parallel_image_to_video_equals_one_rank(ray_session, checkpoints, one_rank, image_file):
    result = _run(checkpoints["i2v"], _request(image_file.read_bytes()), ParallelConfig(cfg_parallel=True))
    _assert_close(result.latents, one_rank["i2v"].latents)


def test_dedivae_and_aco_give_one_ranks_latents_frames_and_sound(ray_session, checkpoints, one_rank):
    reference = one_rank["t2v"]
    result = _run(checkpoints["t2v"], _request(), ParallelConfig(ulysses=2, decode_ranks=1, aco="on"))
    _assert_close(result.latents, reference.latents)
    assert result.timings["aco_steps"] > 0  # the decode rank did compute attention heads
    assert (result.frames - reference.frames).abs().max().item() <= FRAME_TOLERANCE
    assert result.sound.sample_rate == reference.sound.sample_rate
    assert result.sound.samples.shape == reference.sound.samples.shape
    assert reference.sound.samples.abs().max().item() > 1e-2  # a sound to compare, not silence
    assert (result.sound.samples - reference.sound.samples).abs().max().item() <= SOUND_TOLERANCE
