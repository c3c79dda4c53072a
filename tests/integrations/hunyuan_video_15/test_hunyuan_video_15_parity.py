"""pipedit's HunyuanVideo 1.5 adapter, run through its own engine on one rank, against diffusers'
HunyuanVideo15Pipeline / HunyuanVideo15ImageToVideoPipeline on tiny random checkpoints with other
sizes than the demo (3 heads of 8, 3 blocks, 4 latent channels, Qwen width 24, ByT5 width 16).

A prompt with quoted text (ByT5 encodes `Text "OPEN". `) and one without (no ByT5 tokens), at
guidance 4.5 (the checkpoint's guider has the same scale, as the pipelines read it from there).
Tolerance: pipedit sends only the valid text tokens and pads the two branches to a common length
(masked), and runs both branches in one batched forward, where the pipelines run each branch alone
over all 1000 + 256 (+ 729) padded positions: the same math, summed in another order, so the last
float bits may move. Latents are compared at the contract's 1e-4 relative (max |diff| / max |ref|).
"""

import numpy as np
import pytest
import torch

from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from reference_cache import cached

GUIDANCE = 4.5
PROMPTS = ['a shop sign that reads "OPEN" at night', "a red kite over the dunes"]
FRAMES, STEPS, SEED = 9, 2, 7


def dims(seed: int):
    from pipedit.integrations.hunyuan_video_15.demo_checkpoint import HunyuanVideo15Dims

    return HunyuanVideo15Dims(heads=3, head_dim=8, rope_axes=(2, 2, 4), layers=3, latent_channels=4, text_dim=24,
                              byt5_dim=16, image_dim=16, guidance_scale=GUIDANCE, seed=seed)


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    from pipedit.integrations.hunyuan_video_15.demo_checkpoint import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("hv15") / "t2v", dims(5))


def _relative(ours, reference):
    assert ours.shape == reference.shape
    scale = reference.abs().max().item()
    assert scale > 0.1
    return (ours - reference).abs().max().item() / scale


@pytest.mark.slow
def test_text_to_video_latents_equal_diffusers(t2v):
    from diffusers import HunyuanVideo15Pipeline

    pipe = cached(HunyuanVideo15Pipeline.from_pretrained(t2v), t2v)
    pipe.set_progress_bar_config(disable=True)
    with Engine(EngineConfig(model=ModelConfig(path=str(t2v)))) as engine:
        for prompt in PROMPTS:
            ours = engine.generate(VideoRequest(prompt, height=48, width=80, num_frames=FRAMES, steps=STEPS, seed=SEED,
                                                guidance_scale=GUIDANCE)).latents
            reference = pipe(prompt=prompt, height=48, width=80, num_frames=FRAMES, num_inference_steps=STEPS,
                             output_type="latent", generator=torch.Generator("cpu").manual_seed(SEED)).frames
            assert _relative(ours, reference) <= 1e-4, prompt


def test_quoted_text_reaches_byt5_and_plain_prompts_send_no_glyph_tokens(t2v):
    from pipedit.adapter import load_adapter

    adapter = load_adapter(t2v, parts={"text"})
    quoted, plain = (adapter.encode_prompt(prompt) for prompt in PROMPTS)
    assert quoted["prompt_embeds_2"].shape[1] == len('Text "OPEN". ') + 1  # bytes and </s>
    assert plain["prompt_embeds_2"].shape[1] == 0 and plain["negative_prompt_embeds_2"].shape[1] == 0


@pytest.mark.slow
def test_image_to_video_latents_equal_diffusers(tmp_path_factory):
    """The video at the size the pipeline picks for this image (its target_size bucket)."""
    from diffusers import HunyuanVideo15ImageToVideoPipeline
    from PIL import Image

    from pipedit.integrations.hunyuan_video_15.demo_checkpoint import write_demo_checkpoint
    from pipedit.integrations.hunyuan_video_15.image_condition import bucket_size

    checkpoint = write_demo_checkpoint(tmp_path_factory.mktemp("hv15") / "i2v", dims(6), preset="i2v")
    image = Image.fromarray((np.random.RandomState(2).rand(41, 67, 3) * 255).astype("uint8"))
    path = tmp_path_factory.mktemp("image") / "start.png"
    image.save(path)
    height, width = bucket_size(image.size, 64, 16)
    pipe = cached(HunyuanVideo15ImageToVideoPipeline.from_pretrained(checkpoint), checkpoint)
    pipe.set_progress_bar_config(disable=True)
    reference = pipe(image=image, prompt=PROMPTS[0], num_frames=FRAMES, num_inference_steps=STEPS,
                     output_type="latent", generator=torch.Generator("cpu").manual_seed(SEED)).frames
    with Engine(EngineConfig(model=ModelConfig(path=str(checkpoint)))) as engine:
        ours = engine.generate(VideoRequest(PROMPTS[0], height=height, width=width, num_frames=FRAMES, steps=STEPS,
                                            seed=SEED, guidance_scale=GUIDANCE, image=path.read_bytes())).latents
    assert _relative(ours, reference) <= 1e-4


def test_meanflow_checkpoints_and_guider_options_pipedit_does_not_run_are_refused(t2v, tmp_path):
    import json
    import shutil

    from pipedit.adapter import model_inputs
    from pipedit.errors import ModelPathError

    def edited(component, file, **changes):
        copy = shutil.copytree(t2v, tmp_path / f"{component}-{len(list(tmp_path.iterdir()))}")
        config = copy / component / file
        config.write_text(json.dumps({**json.loads(config.read_text()), **changes}))
        return copy

    with pytest.raises(ModelPathError, match="runs classifier-free guidance with guidance_rescale 0.0"):
        model_inputs(edited("guider", "guider_config.json", guidance_rescale=0.7))
    with pytest.raises(ModelPathError, match="serve the 480p or 720p text- or image-to-video release"):
        model_inputs(edited("transformer", "config.json", use_meanflow=True))
    off = model_inputs(edited("guider", "guider_config.json", enabled=False))
    assert not off.capabilities.negative_prompt and not off.capabilities.cfg_parallel
    assert model_inputs(t2v).capabilities.cfg_parallel
