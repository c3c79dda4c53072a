"""Wan2.1 image-to-video (WanImageToVideoPipeline with a CLIP image encoder) and Wan2.2 TI2V-5B
(expand_timesteps, 48-channel VAE; with and without an image) through pipedit's engine against
diffusers' pipelines, on tiny random checkpoints with other sizes than the demo (3 heads of 8, text
width 24, CLIP width 20 over 24-pixel crops), an image of another size and aspect than the video
(so the reference's resize and the CLIP crop both act).

Tolerance: both sides run the same fp32 modules on the same CPU; pipedit batches the [negative,
positive] branches in one forward where diffusers runs two, which may move the last float bits, so
final latents are compared at the contract's 1e-4 relative (max |diff| / max |reference|).
"""

import io
import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from pipedit.adapter import UnsupportedInputError, load_adapter
from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import ModelPathError
from pipedit.images import load_image
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from reference_cache import cached

PROMPT = "a  paper boat &amp; a duck,\ton a pond "
HEIGHT, WIDTH, FRAMES, STEPS = 32, 48, 5, 3


@pytest.fixture(scope="module")
def tiny_i2v(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    dims = WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, image_dim=20, image_size=24, seed=9)
    return write_demo_checkpoint(tmp_path_factory.mktemp("wan-i2v") / "tiny", dims, preset="i2v")


@pytest.fixture(scope="module")
def image_bytes():
    pixels = (np.random.RandomState(4).rand(61, 93, 3) * 255).astype("uint8")  # not the video's size or aspect
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def reference_pipe(tiny_i2v):
    from diffusers import WanImageToVideoPipeline

    pipe = WanImageToVideoPipeline.from_pretrained(tiny_i2v)
    pipe.set_progress_bar_config(disable=True)
    return cached(pipe, tiny_i2v)


@pytest.fixture(scope="module")
def engine(tiny_i2v):
    with Engine(EngineConfig(model=ModelConfig(path=str(tiny_i2v)))) as engine:
        yield engine


def _reference(pipe, image_bytes, seed, negative_prompt=None):
    return pipe(image=load_image(image_bytes), prompt=PROMPT, negative_prompt=negative_prompt, height=HEIGHT,
                width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=5.0,
                generator=torch.Generator("cpu").manual_seed(seed), output_type="latent").frames


def _relative(ours, reference):
    assert ours.shape == reference.shape
    return ((ours - reference).abs().max() / reference.abs().max()).item()


def _request(image_bytes, **options):
    return VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=STEPS, guidance_scale=5.0,
                        seed=3, image=image_bytes, **options)


def test_i2v_latents_equal_diffusers_with_and_without_a_negative_prompt(engine, reference_pipe, image_bytes):
    default = engine.generate(_request(image_bytes))
    negative = engine.generate(_request(image_bytes, negative_prompt="blurry, static"))
    reference_default = _reference(reference_pipe, image_bytes, 3)
    reference_negative = _reference(reference_pipe, image_bytes, 3, "blurry, static")
    assert _relative(default.latents, reference_default) <= 1e-4
    assert _relative(negative.latents, reference_negative) <= 1e-4
    assert _relative(reference_negative, reference_default) > 1e-3  # the negative prompt matters (10x the bound)
    assert default.frames.shape == (FRAMES, HEIGHT, WIDTH, 3)


def test_the_condition_holds_the_image_embedding_and_the_first_frame_channels(tiny_i2v, image_bytes):
    adapter = load_adapter(tiny_i2v, parts={"text"})
    assert adapter.capabilities.image and adapter.capabilities.needs_image
    from pipedit.adapter import VideoShape

    cond = adapter.encode_prompt(PROMPT, image=load_image(image_bytes), shape=VideoShape(HEIGHT, WIDTH, FRAMES))
    assert cond["image_embeds"].shape == (1, (24 // 8) ** 2 + 1, 20)  # CLIP patches + class token
    mask, latents = cond["condition"][:, :4], cond["condition"][:, 4:]
    assert latents.shape == (1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)
    assert mask[:, :, 0].eq(1).all() and not mask[:, :, 1:].any()  # only the first latent frame is given


def test_i2v_refuses_a_request_without_an_image_and_a_guidance_scale_2(engine):
    with pytest.raises(UnsupportedInputError, match="image-to-video: send an image") as error:
        engine.generate(VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=1))
    assert error.value.param == "image"
    with pytest.raises(UnsupportedInputError, match="two-expert checkpoints only") as error:
        engine.generate(VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=1,
                                     image=b"unused", guidance_scale_2=3.0))
    assert error.value.param == "guidance_scale_2"


def _variant(tiny_i2v, tmp_path, **changes):
    folder = tmp_path / "variant"
    shutil.copytree(tiny_i2v, folder)
    index = json.loads((folder / "model_index.json").read_text())
    index.update(changes)
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


def test_text_to_video_refuses_an_image_naming_the_models_that_take_one(tiny_i2v, tmp_path):
    from pipedit.adapter import check_inputs

    t2v = load_adapter(_variant(tiny_i2v, tmp_path, _class_name="WanPipeline"), parts=set())
    assert not t2v.capabilities.image and t2v.capabilities.negative_prompt
    with pytest.raises(UnsupportedInputError, match="WanImageToVideoPipeline"):
        check_inputs(t2v, negative_prompt=None, image=b"an image")


@pytest.mark.parametrize("changes,message", [
    ({"transformer": [None, None]}, "has no transformer.*supported: Wan2.1 T2V"),
    ({"image_encoder": [None, None]}, "lacks image_encoder or image_processor"),
    ({"_class_name": "WanVACEPipeline"}, "holds a WanVACEPipeline; the wan adapter loads Wan2.1 T2V"),
])
def test_unsupported_wan_checkpoints_are_refused_naming_what_is_supported(tiny_i2v, tmp_path, changes, message):
    with pytest.raises(ModelPathError, match=message):
        load_adapter(_variant(tiny_i2v, tmp_path, **changes), parts=set(), model="wan")


def test_ti2v_latents_equal_diffusers_with_and_without_an_image(tmp_path_factory, image_bytes):
    """Per-token timesteps (0 on the given first frame), the image's latents in the first frame at
    every model input and after the loop (runtime/denoise.py's finish_latents hook)."""
    from diffusers import WanImageToVideoPipeline, WanPipeline
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    dims = WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=21)
    path = write_demo_checkpoint(tmp_path_factory.mktemp("wan-ti2v") / "tiny", dims, preset="ti2v")
    size = {"height": 32, "width": 64, "num_frames": 5, "guidance_scale": 5.0}  # multiples of 32: 16x VAE, 2x2 patches
    with Engine(EngineConfig(model=ModelConfig(path=str(path)))) as engine:
        assert engine.executor.worker.adapter.capabilities.image and not engine.executor.worker.adapter.capabilities.needs_image
        text_only = engine.generate(VideoRequest(PROMPT, steps=STEPS, seed=3, **size))
        with_image = engine.generate(VideoRequest(PROMPT, steps=STEPS, seed=3, image=image_bytes,
                                                  negative_prompt="blurry", **size))
    generator = torch.Generator("cpu")
    options = dict(prompt=PROMPT, num_inference_steps=STEPS, output_type="latent", **size)
    reference_text = cached(WanPipeline.from_pretrained(path), path)(generator=generator.manual_seed(3), **options).frames
    reference_image = cached(WanImageToVideoPipeline.from_pretrained(path), path)(
        image=load_image(image_bytes), negative_prompt="blurry", generator=generator.manual_seed(3), **options).frames
    assert reference_text.shape == (1, 48, 2, 32 // 16, 64 // 16)
    assert _relative(text_only.latents, reference_text) <= 1e-4
    assert _relative(with_image.latents, reference_image) <= 1e-4
    assert _relative(reference_image, reference_text) > 1e-3  # the image matters


def test_demo_checkpoint_cli_writes_the_i2v_preset_and_names_the_presets(tmp_path, capsys):
    from pipedit.cli import main

    assert main(["demo-checkpoint", "--model", "wan", "--preset", "i2v", str(tmp_path / "i2v")]) == 0
    index = json.loads((tmp_path / "i2v" / "model_index.json").read_text())
    assert index["_class_name"] == "WanImageToVideoPipeline"
    assert index["image_encoder"] == ["transformers", "CLIPVisionModelWithProjection"]
    assert main(["demo-checkpoint", "--model", "wan", "--preset", "i3v", str(tmp_path / "x")]) == 2
    assert "unknown wan preset 'i3v'; choose one of: t2v, a14b, i2v, i2v-a14b, ti2v" in capsys.readouterr().err


def test_an_image_encode_does_not_wait_for_a_decode_and_neither_disturbs_the_other(tiny_i2v, image_bytes):
    """The text rank encodes the next request's image (a second thread under DeDiVAE) while its VAE
    decodes. AutoencoderKLWan resets its encoder's and decoder's feature caches on every call, so
    the encode runs on its own shallow copy of the VAE. A decode is held open after its first
    latent frame (its caches filled): the encode finishes meanwhile, and both equal the same
    calls made alone (bitwise: same kernels, same process)."""
    import threading

    from pipedit.adapter import VideoShape

    adapter = load_adapter(str(tiny_i2v), parts={"text", "vae"})
    # 4 latent frames: the decoder runs 4 times, each call reading the caches the last one left
    # (an encode resetting them between calls would change the frames after it).
    shape = VideoShape(HEIGHT, WIDTH, 13)
    latents = torch.randn(adapter.latent_shape(shape), generator=torch.Generator().manual_seed(5))
    image = load_image(image_bytes)
    frames_alone, cond_alone = adapter.decode(latents), adapter.encode_image(image, shape)

    decoder, calls, held, release = adapter.vae.decoder, [], threading.Event(), threading.Event()
    forward = decoder.forward

    def held_after_the_first_frame(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            held.set()
            release.wait(60)
        return forward(*args, **kwargs)

    decoder.forward = held_after_the_first_frame
    decoded, encoded = [], []
    decoding = threading.Thread(target=lambda: decoded.append(adapter.decode(latents)))
    decoding.start()
    try:
        assert held.wait(60)
        encoding = threading.Thread(target=lambda: encoded.append(adapter.encode_image(image, shape)))
        encoding.start()
        encoding.join(60)
        finished_during_the_decode = not encoding.is_alive() and not release.is_set()
    finally:
        release.set()
        decoding.join(60)
    assert finished_during_the_decode and len(calls) == 4  # the encode never ran the decoder
    assert torch.equal(decoded[0], frames_alone)
    assert cond_alone.keys() == encoded[0].keys()
    assert all(torch.equal(encoded[0][key], cond_alone[key]) for key in cond_alone)
