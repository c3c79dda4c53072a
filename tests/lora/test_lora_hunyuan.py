"""A run-wide LoRA adapter on HunyuanVideo through `pipedit generate --lora PATH:SCALE` against
diffusers' `pipe.load_lora_weights(file, adapter_name=...)` + `pipe.set_adapters(name, scale)` on the
demo model: the adapter in HunyuanVideo's original form (fused img_attn_qkv and img_mlp.fc1 of both
dual-stream blocks, rank 3; diffusers' converter splits the qkv matrix in three).

Tolerance: the same fp32 modules (diffusers' peft layers) on the same CPU in the same op order;
1e-4 relative on the final latents is the contract's bound. The adapter moves them far more.
The same adapter under Ulysses 2: tests/runtime/test_sequence_parallel_e2e.py.
"""

import pytest
import torch

from lora_files import with_adapters, write_hunyuan_adapter
from pipedit.cli import main

PROMPT, HEIGHT, WIDTH, FRAMES, STEPS, SEED = "a lighthouse at dusk", 80, 112, 17, 2, 5
SCALE = 0.8


def diffusers_latents(checkpoint, adapter=None):
    from diffusers import HunyuanVideoPipeline

    # Its own pipeline: the session's stays without adapters.
    pipe = with_adapters(HunyuanVideoPipeline.from_pretrained(checkpoint), [adapter] if adapter else [], [SCALE])
    return pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                generator=torch.Generator("cpu").manual_seed(SEED), output_type="latent").frames


@pytest.fixture(scope="module")
def adapter(demo_checkpoint, tmp_path_factory):
    return write_hunyuan_adapter(demo_checkpoint, tmp_path_factory.mktemp("hunyuan-lora"))


def test_generate_with_an_original_form_adapter_equals_diffusers(demo_checkpoint, adapter, tmp_path):
    reference = diffusers_latents(demo_checkpoint, adapter)
    code = main(["generate", "--prompt", PROMPT, "--model-path", str(demo_checkpoint), "--height", str(HEIGHT),
                 "--width", str(WIDTH), "--num-frames", str(FRAMES), "--steps", str(STEPS), "--seed", str(SEED),
                 "--output", str(tmp_path / "out.mp4"), "--save-latents", str(tmp_path / "latents.pt"),
                 "--lora", f"{adapter}:{SCALE}"])
    assert code == 0
    latents = torch.load(tmp_path / "latents.pt")
    scale = reference.abs().max().item()
    assert (latents - reference).abs().max().item() <= 1e-4 * scale
    without = diffusers_latents(demo_checkpoint)
    assert (without - reference).abs().max().item() > 1e-2 * scale


def test_a_bad_scale_on_the_command_line_names_the_flag(demo_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--prompt", "x", "--model-path", str(demo_checkpoint), "--lora", "a.safetensors:lots:both"])
    assert "--lora" in capsys.readouterr().err


def test_a_kohya_key_naming_no_layer_fails_the_start_naming_the_file_and_the_form(demo_checkpoint, tmp_path):
    """kohya files are read (tests/lora/test_lora_forms.py); one whose layer this model lacks is
    refused before any request, naming its key and the form it looks like."""
    from safetensors.torch import save_file

    from pipedit.adapter import load_adapter
    from pipedit.errors import UserInputError
    from pipedit.lora.inject import apply_loras
    from pipedit.lora.spec import LoraSpec

    path = tmp_path / "kohya.safetensors"
    save_file({"lora_unet_double_blocks_9_img_attn_qkv.lora_down.weight": torch.zeros(3, 64),
               "lora_unet_double_blocks_9_img_attn_qkv.lora_up.weight": torch.zeros(192, 3)}, str(path))
    with pytest.raises(UserInputError, match=r"LoRA file .*kohya.safetensors.*key 'lora_unet_double_blocks_9_.*"
                                             r"matches no layer \(the file looks like the musubi-tuner/kohya"):
        apply_loras(load_adapter(demo_checkpoint, parts={"dit"}), (LoraSpec(str(path)),))
