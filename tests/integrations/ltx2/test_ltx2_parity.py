"""pipedit's LTX-2 on one rank against diffusers' pipelines (output_type="latent", the same seed and
CPU generator, fp32 on CPU): the video latents and the audio latents within 1e-4 relative (the
contract's bound; they agree to ~1e-7: the only differences are the CFG batch's matmul rounding and
sigma taken as timestep / 1000). Checkpoints of the test dims (not the demo's). Cases:
- LTX-2 text-to-video with every guidance pass (CFG with audio's own scale, STG on block 1,
  modality isolation, rescale) against LTX2Pipeline;
- the same LTX2Pipeline checkpoint given an image, against LTX2ImageToVideoPipeline loaded from it;
- an LTX-2.3 image-to-video checkpoint (LTX2ImageToVideoPipeline) with another image size;
- the distilled scheduler at guidance 1 (one pass a step) with a fixed flow_shift, against
  LTX2Pipeline with the scheduler a fixed shift gives (use_dynamic_shifting off, shift set).
pipedit's latents are unnormalised with the VAEs' statistics for the comparison, as the pipeline
returns them."""

import io

import numpy as np
import pytest
import torch
from reference_cache import cached

from pipedit.config import EngineConfig, ModelConfig
from pipedit.integrations.ltx2.demo_checkpoint import TEST_DIMS, write_demo_checkpoint
from pipedit.integrations.ltx2.guidance import Guidance
from pipedit.integrations.ltx2.latents import JointGrid
from pipedit.request import VideoRequest

PROMPT, NEGATIVE = "a drummer on a rooftop at dusk", "blurry, silent"
HEIGHT, WIDTH, FRAMES, STEPS, FPS, SEED = 32, 96, 9, 3, 20, 5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx2")
    return {preset: write_demo_checkpoint(root / preset, TEST_DIMS, preset=preset)
            for preset in ("t2v", "i2v-2.3", "t2v-distilled")}


def _image(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    from PIL import Image

    Image.fromarray((np.random.RandomState(4).rand(height, width, 3) * 255).astype("uint8")).save(buffer, "PNG")
    return buffer.getvalue()


def _diffusers_kwargs(guidance_scale: float, layers: int) -> dict:
    g = Guidance.for_scale(guidance_scale, layers)
    return dict(guidance_scale=g.video.cfg, stg_scale=g.video.stg, modality_scale=g.video.modality,
                guidance_rescale=g.video.rescale, audio_guidance_scale=g.audio.cfg, audio_stg_scale=g.audio.stg,
                audio_modality_scale=g.audio.modality, audio_guidance_rescale=g.audio.rescale,
                spatio_temporal_guidance_blocks=list(g.stg_blocks))


def _unnormalised(pipe, latents: torch.Tensor, grid: JointGrid):
    vae, audio_vae = pipe.vae, pipe.audio_vae
    view = (1, -1, 1, 1, 1)
    video = grid.video(latents) * vae.latents_std.view(view) / vae.config.scaling_factor + vae.latents_mean.view(view)
    tokens = grid.audio_tokens_of(grid.audio(latents))
    return video, grid.audio_from_tokens(tokens * audio_vae.latents_std + audio_vae.latents_mean)


CASES = [  # preset, image (width, height) or None, guidance_scale, flow_shift
    ("t2v", None, 4.0, None),
    ("t2v", (70, 38), 4.0, None),
    ("i2v-2.3", (40, 30), 3.0, None),
    ("t2v-distilled", None, 1.0, 5.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("preset,image,guidance,flow_shift", CASES,
                         ids=["t2v", "t2v with an image", "ltx-2.3 i2v", "distilled flow_shift"])
def test_one_rank_latents_equal_diffusers(engines, checkpoints, preset, image, guidance, flow_shift):
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2ImageToVideoPipeline, LTX2Pipeline
    from PIL import Image

    path = checkpoints[preset]
    image_bytes = _image(*image) if image else None
    request = VideoRequest(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                           steps=STEPS, seed=SEED, fps=FPS, guidance_scale=guidance, flow_shift=flow_shift,
                           image=image_bytes)
    engine = engines.get(EngineConfig(model=ModelConfig(path=str(path))))
    latents = engine.generate(request).latents

    pipe = (LTX2ImageToVideoPipeline if image else LTX2Pipeline).from_pretrained(path)
    if flow_shift is not None:
        pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config, use_dynamic_shifting=False,
                                                                     shift=flow_shift)
    extra = {"image": Image.open(io.BytesIO(image_bytes)).convert("RGB")} if image else {}
    reference = cached(pipe, path)(
        prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, frame_rate=FPS,
        num_inference_steps=STEPS, generator=torch.Generator().manual_seed(SEED), output_type="latent",
        **_diffusers_kwargs(guidance, TEST_DIMS.layers), **extra)

    from pipedit.adapter import model_inputs

    grid = model_inputs(path).grid(request.shape)
    video, audio = _unnormalised(pipe, latents, grid)
    for ours, theirs in ((video, reference.frames), (audio, reference.audio)):
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().max().item() <= 1e-4 * theirs.abs().max().item()
