"""`pipedit generate --image / --negative-prompt`: bad images and inputs the model does not take
are refused with one line and exit 2 before any model loads; a negative prompt the model takes
reaches its encode_prompt and gives WanPipeline's latents for that negative prompt; an image on
the tiny Wan2.1 I2V demo gives WanImageToVideoPipeline's latents for that image.

Tolerance of the Wan comparisons: as tests/integrations/wan/test_wan_parity.py (same fp32 modules
on the same CPU; pipedit batches the [negative, positive] branches where diffusers runs two, which
may move the last float bits): 1e-4 relative (max |diff| / max |reference|)."""

import pytest
import torch

from pipedit.cli import main
from pipedit.runtime import engine as engine_module
from reference_cache import cached

NEGATIVE = "blurry, static, low quality"
WAN_SIZE = ["--height", "48", "--width", "48", "--num-frames", "5", "--steps", "2", "--seed", "3",
            "--guidance-scale", "5.0"]


def write_image(path, fmt="PNG", size=(24, 16)):
    from PIL import Image

    Image.new("RGB", size, (200, 40, 90)).save(path, format=fmt)
    return path


@pytest.fixture(scope="module")
def wan_demo(tmp_path_factory):
    """The tiny Wan2.1 text-to-video demo (what `--model wan` serves), written for this module."""
    from pipedit.integrations.wan.demo_checkpoint import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("models") / "wan-demo")


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if an Engine (which loads the weights) is built."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was refused")

    monkeypatch.setattr(engine_module.Engine, "__init__", refuse)


def _generate(capsys, tmp_path, *flags):
    output = tmp_path / "v.mp4"
    code = main(["generate", "--prompt", "a cat", "--output", str(output), *map(str, flags)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and not output.exists()
    return code, err


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "missing.png", "missing.png does not exist; give a png, jpeg or webp file"),
    (lambda d: d, "is a folder"),
    (lambda d: write_image(d / "anim.gif", "GIF"), "is a GIF image; allowed formats: png, jpeg or webp"),
    (lambda d: (d / "notes.png").write_text("not an image") and d / "notes.png", "not an image pipedit can read"),
    (lambda d: (d / "cut.png").write_bytes(write_image(d / "whole.png").read_bytes()[:60]) and d / "cut.png",
     "damaged or truncated"),
])
def test_bad_image_is_refused_before_the_model_loads(demo_checkpoint, tmp_path, capsys, no_model_load, make,
                                                     message):
    code, err = _generate(capsys, tmp_path, "--model-path", demo_checkpoint, "--image", make(tmp_path))
    assert code == 2 and "--image" in err and message in err


def test_inputs_hunyuan_video_does_not_take_are_refused_naming_the_models_that_do(demo_checkpoint, tmp_path,
                                                                                   capsys, no_model_load):
    code, err = _generate(capsys, tmp_path, "--model-path", demo_checkpoint,
                          "--image", write_image(tmp_path / "first.webp", "WEBP"))
    assert code == 2 and "takes no image" in err and "WanImageToVideoPipeline" in err
    code, err = _generate(capsys, tmp_path, "--model-path", demo_checkpoint, "--negative-prompt", NEGATIVE)
    assert code == 2 and "negative_prompt is not supported" in err and "(wan, opensora-plan, ltx-2)" in err
    code, err = _generate(capsys, tmp_path, "--model-path", demo_checkpoint, "--height", "100")
    assert code == 2 and "multiples of 16" in err  # shapes, too, are checked from the configs


def test_a_blank_negative_prompt_asks_nothing_of_a_model_without_one(demo_checkpoint, tmp_path, capsys):
    """check_inputs lets it through for HunyuanVideo, so its encode_prompt must not receive it."""
    output = tmp_path / "v.mp4"
    assert main(["generate", "--prompt", "a cat", "--negative-prompt", " ", "--model-path", str(demo_checkpoint),
                 "--height", "32", "--width", "32", "--num-frames", "1", "--steps", "1", "--output", str(output)]) == 0
    assert output.is_file()


def test_wan_text_to_video_refuses_an_image_before_loading(wan_demo, tmp_path, capsys, no_model_load):
    code, err = _generate(capsys, tmp_path, "--model-path", wan_demo, *WAN_SIZE,
                          "--image", write_image(tmp_path / "first.jpg", "JPEG"))
    assert code == 2 and "wan with this checkpoint takes no image" in err


def test_wan_negative_prompt_reaches_encode_prompt_and_gives_wanpipelines_latents(wan_demo, tmp_path, monkeypatch):
    from diffusers import WanPipeline
    from pipedit.integrations.wan.adapter import WanAdapter

    seen, encode = [], WanAdapter.encode_prompt
    monkeypatch.setattr(WanAdapter, "encode_prompt",
                        lambda self, prompt, **inputs: seen.append(inputs) or encode(self, prompt, **inputs))
    latents = tmp_path / "latents.pt"
    assert main(["generate", "--prompt", "a cat", "--model-path", str(wan_demo), "--negative-prompt", NEGATIVE,
                 *WAN_SIZE, "--output", str(tmp_path / "v.mp4"), "--save-latents", str(latents)]) == 0
    assert seen == [{"negative_prompt": NEGATIVE, "guided": True}]  # guidance 5 (WAN_SIZE): both branches

    pipe = cached(WanPipeline.from_pretrained(wan_demo), wan_demo)
    pipe.set_progress_bar_config(disable=True)

    def reference(**negative):
        return pipe(prompt="a cat", height=48, width=48, num_frames=5, num_inference_steps=2, guidance_scale=5.0,
                    generator=torch.Generator("cpu").manual_seed(3), output_type="latent", **negative).frames

    with_negative, without = reference(negative_prompt=NEGATIVE), reference()
    ours = torch.load(latents)

    def relative(a, b):
        return ((a - b).abs().max() / b.abs().max()).item()

    assert relative(ours, with_negative) <= 1e-4
    assert relative(without, with_negative) > 1e-2  # the negative prompt does change the video


@pytest.fixture(scope="module")
def wan_i2v_demo(tmp_path_factory):
    """The tiny Wan2.1 image-to-video demo (`pipedit demo-checkpoint --model wan --preset i2v`)."""
    from pipedit.integrations.wan.demo_checkpoint import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("models") / "wan-i2v", preset="i2v")


def test_generate_image_to_video_gives_wanimagetovideopipelines_latents(wan_i2v_demo, tmp_path, capsys):
    from diffusers import WanImageToVideoPipeline
    from PIL import Image

    code, err = _generate(capsys, tmp_path, "--model-path", wan_i2v_demo, *WAN_SIZE)  # no image: refused at once
    assert code == 2 and "is image-to-video: send an image" in err
    image, latents = write_image(tmp_path / "first.jpg", "JPEG", size=(40, 30)), tmp_path / "latents.pt"
    assert main(["generate", "--prompt", "a cat", "--model-path", str(wan_i2v_demo), "--image", str(image),
                 *WAN_SIZE, "--output", str(tmp_path / "v.mp4"), "--save-latents", str(latents)]) == 0

    pipe = cached(WanImageToVideoPipeline.from_pretrained(wan_i2v_demo), wan_i2v_demo)
    pipe.set_progress_bar_config(disable=True)
    reference = pipe(image=Image.open(image).convert("RGB"), prompt="a cat", height=48, width=48, num_frames=5,
                     num_inference_steps=2, guidance_scale=5.0, generator=torch.Generator("cpu").manual_seed(3),
                     output_type="latent").frames
    ours = torch.load(latents)
    assert ours.shape == reference.shape
    assert ((ours - reference).abs().max() / reference.abs().max()).item() <= 1e-4
