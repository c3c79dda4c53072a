"""The tiny LTX-2 checkpoints: diffusers' own pipelines load them unchanged from disk and run them
end to end (both guidance extras on: three transformer passes a step), LTX-2 and LTX-2.3 forms,
text- and image-to-video, the demo's sizes and others."""

import hashlib
import json

import numpy as np
import PIL.Image
import pytest
import torch

from pipedit.errors import UserInputError
from pipedit.integrations.ltx2.demo_checkpoint import (
    TEST_DIMS,
    LTX2Dims,
    build_pipeline,
    write_demo_checkpoint,
    write_preset,
)
from pipedit.integrations.ltx2.presets import PRESETS, described

COMPONENTS = ["audio_vae", "connectors", "scheduler", "text_encoder", "tokenizer", "transformer", "vae", "vocoder"]
HEIGHT, WIDTH, FRAMES, FPS = 32, 64, 9, 24.0
# Written once for the module: (preset, dims). The last one has every width unlike the demo's.
WRITTEN = {"t2v": ("t2v", None), "i2v": ("i2v", None), "t2v-2.3": ("t2v-2.3", None),
           "i2v-2.3-other-dims": ("i2v-2.3", TEST_DIMS)}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx2")
    written = {}
    for name, (preset, dims) in WRITTEN.items():
        written[name] = (write_preset(root / name, preset) if dims is None
                         else write_demo_checkpoint(root / name, dims, preset=preset))
    return written


@pytest.fixture(scope="module")
def loaded(folders):
    from diffusers import DiffusionPipeline

    pipes = {}

    def load(name):
        if name not in pipes:
            pipes[name] = DiffusionPipeline.from_pretrained(folders[name])
            pipes[name].set_progress_bar_config(disable=True)
        return pipes[name]

    return load


def _image(seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, size=(40, 72, 3), dtype=np.uint8)
    return PIL.Image.fromarray(pixels)


def _run(pipe, output_type="latent", prompt="a red fox runs through snow", **extra):
    if "ImageToVideo" in type(pipe).__name__:
        extra.setdefault("image", _image())
    return pipe(prompt=prompt, negative_prompt="blurry", height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                frame_rate=FPS, num_inference_steps=2, guidance_scale=3.0, stg_scale=1.0,
                spatio_temporal_guidance_blocks=[1], modality_scale=2.0, guidance_rescale=0.7,
                max_sequence_length=pipe.tokenizer.model_max_length, generator=torch.Generator().manual_seed(5),
                output_type=output_type, return_dict=False, **extra)


def _digest(folder):
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file()}


def test_presets_name_both_pipelines_and_both_releases():
    default, about = described()
    assert default == "t2v" and {"t2v", "i2v", "t2v-2.3", "i2v-2.3"} <= set(about)
    assert {PRESETS[name].version for name in about} == {"2.0", "2.3"}
    with pytest.raises(UserInputError, match="unknown ltx-2 preset 'nope'; choose one of: t2v, i2v"):
        build_pipeline(preset="nope")


@pytest.mark.parametrize("name, pipeline", [("t2v", "LTX2Pipeline"), ("i2v", "LTX2ImageToVideoPipeline")])
def test_layout_is_diffusers_ltx2(folders, name, pipeline):
    index = json.loads((folders[name] / "model_index.json").read_text())
    assert index["_class_name"] == pipeline
    assert sorted(k for k, v in index.items() if not k.startswith("_") and v[0] is not None) == COMPONENTS
    assert index["text_encoder"] == ["transformers", "Gemma3ForConditionalGeneration"]
    assert index["connectors"][1] == "LTX2TextConnectors" and index["vocoder"][1] == "LTX2Vocoder"
    for component in ("transformer", "vae", "audio_vae", "connectors", "vocoder"):
        assert (folders[name] / component / "diffusion_pytorch_model.safetensors").is_file()
    scheduler = json.loads((folders[name] / "scheduler" / "scheduler_config.json").read_text())
    assert scheduler["_class_name"] == "FlowMatchEulerDiscreteScheduler"
    assert scheduler["use_dynamic_shifting"] and scheduler["shift_terminal"] == 0.1
    assert (scheduler["base_shift"], scheduler["max_shift"]) == (0.95, 2.05)


def test_the_same_call_writes_the_same_bytes(folders, tmp_path):
    assert _digest(write_preset(tmp_path / "again", "t2v")) == _digest(folders["t2v"])


def test_refuses_to_overwrite_a_checkpoint(folders):
    with pytest.raises(FileExistsError, match="already holds a checkpoint"):
        write_preset(folders["t2v"], "t2v")


def test_the_variants_switch_what_the_releases_switch(loaded):
    ltx2, ltx23 = loaded("t2v"), loaded("t2v-2.3")
    for pipe, v23 in ((ltx2, False), (ltx23, True)):
        config = pipe.transformer.config
        assert (config.gated_attn, config.cross_attn_mod, config.audio_gated_attn, config.audio_cross_attn_mod,
                config.perturbed_attn) == (v23,) * 5
        assert config.use_prompt_embeddings is not v23  # 2.3: the connectors project per modality instead
        assert pipe.connectors.config.per_modality_projections is v23
        assert pipe.connectors.config.video_gated_attn is v23
        assert type(pipe.vocoder).__name__ == ("LTX2VocoderWithBWE" if v23 else "LTX2Vocoder")
    assert (ltx2.vocoder.config.output_sampling_rate, ltx23.vocoder.config.output_sampling_rate) == (24000, 48000)


def test_the_tokenizer_pads_left_and_the_registers_fill_the_padding(loaded):
    pipe = loaded("t2v")
    tokenizer, connectors = pipe.tokenizer, pipe.connectors.config
    assert type(tokenizer).__name__ == "GemmaTokenizer" and tokenizer.padding_side == "left"
    ids = tokenizer("a fox", padding="max_length", max_length=16).input_ids
    assert ids[:10] == [tokenizer.pad_token_id] * 10 and ids[10] == tokenizer.bos_token_id  # then a, space, f, o, x
    assert tokenizer.decode(ids, skip_special_tokens=True) == "a fox"
    registers = connectors.video_connector_num_learnable_registers
    assert registers and tokenizer.model_max_length % registers == 0 and 1024 % registers == 0
    assert connectors.text_proj_in_factor == pipe.text_encoder.config.text_config.num_hidden_layers + 1 >= 3


def test_the_prompt_reaches_the_connectors(loaded):
    pipe = loaded("t2v")
    length = pipe.tokenizer.model_max_length
    embeds, masks = [], []
    for prompt in ("a red fox", "a blue whale swims"):
        embed, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, max_sequence_length=length,
                                               device="cpu")
        video, audio, _ = pipe.connectors(embed, mask)
        assert video.shape[1] == audio.shape[1] == length
        embeds.append(video)
        masks.append(int(mask.sum()))
    assert 0 < masks[0] < masks[1] < length  # padded: the registers take the padding's place
    assert not torch.equal(*embeds)


@pytest.mark.parametrize("name", list(WRITTEN))
def test_two_steps_reproduce_bit_for_bit(loaded, name):
    pipe = loaded(name)
    video, audio = _run(pipe)
    again_video, again_audio = _run(pipe)
    assert torch.equal(video, again_video) and torch.equal(audio, again_audio)
    transformer = pipe.transformer.config
    assert video.shape == (1, transformer.in_channels, 3, HEIGHT // 8, WIDTH // 8)  # 96 video tokens
    audio_vae = pipe.audio_vae.config
    assert audio.shape == (1, audio_vae.latent_channels, 9, audio_vae.mel_bins // 4)  # 0.375 s at 25 latents/s
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()


def test_the_other_dims_differ_from_the_demos_everywhere():
    demo, other = LTX2Dims(), TEST_DIMS
    widths = [field for field in LTX2Dims.__dataclass_fields__ if field != "seed"]
    assert [field for field in widths if getattr(demo, field) == getattr(other, field)] == []
    assert other.heads % 2 == 0 and other.audio_heads % 2 == 0


def test_image_to_video_follows_the_image(loaded):
    pipe = loaded("i2v")
    first, _ = _run(pipe, image=_image(0))
    second, _ = _run(pipe, image=_image(1))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("name, sample_rate", [("t2v", 24000), ("i2v", 24000), ("t2v-2.3", 48000)])
def test_a_full_decode_gives_frames_and_a_waveform(loaded, name, sample_rate):
    pipe = loaded(name)
    frames, waveform = _run(pipe, output_type="pt")
    assert frames.shape == (1, FRAMES, 3, HEIGHT, WIDTH) and 0 <= frames.min() and frames.max() <= 1
    assert pipe.vocoder.config.output_sampling_rate == sample_rate
    # stereo; 33 mel frames (36 less the causal VAE's 3) at 100 a second
    assert waveform.shape == (1, 2, 33 * sample_rate // 100)
    assert torch.isfinite(waveform).all() and waveform.abs().max() > 0
