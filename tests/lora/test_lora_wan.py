"""Run-wide LoRA adapters (model.run_loras, --lora) on Wan against diffusers' own loading:
`pipe.load_lora_weights(file, adapter_name=...)` per file, then `pipe.set_adapters(names, scales)`,
on tiny random checkpoints with other sizes than the demo (3 heads of 8, text width 24).

Adapters (tests/lora_files.py): one in the diffusers/PEFT form, one in Wan's original trainer form
with diff_b bias deltas, at scales 0.7 and 1.3. The same under Ulysses 2:
tests/runtime/test_wan_parallel_e2e.py.

Tolerance: both sides run the same fp32 modules (diffusers' peft layers) on the same CPU; pipedit
batches the [negative, positive] branches in one forward where WanPipeline runs two, which may
move the last float bits, so final latents are compared at the contract's 1e-4 relative (max |diff|
/ max |reference|). Each test also checks that the adapters move the latents far beyond that.
"""

import pytest
import torch

from lora_files import WAN_ORIGINAL_LAYERS, with_adapters, write_original_wan_lora, write_wan_adapters
from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import UserInputError
from pipedit.lora.spec import parse_lora
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

PROMPT = "a red kite over the dunes"
HEIGHT, WIDTH, FRAMES, STEPS, SEED, GUIDANCE = 48, 80, 9, 3, 11, 5.0
SCALES = (0.7, 1.3)


def _write_checkpoint(tmp_path_factory, preset):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp(f"wan-{preset}") / "tiny",
                                 WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=3), preset=preset)


@pytest.fixture(scope="module")
def checkpoint(wan_three_heads):
    return wan_three_heads


@pytest.fixture(scope="module")
def adapters(wan_three_heads_adapters):
    return wan_three_heads_adapters


def _reference(checkpoint, adapters=(), scales=(), into_both=False):
    from diffusers import WanPipeline

    pipe = with_adapters(WanPipeline.from_pretrained(checkpoint), adapters, scales, into_both)
    return pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                guidance_scale=GUIDANCE, output_type="latent",
                generator=torch.Generator("cpu").manual_seed(SEED)).frames


def _ours(checkpoint, loras, fuse=False):
    request = VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=STEPS, seed=SEED,
                           guidance_scale=GUIDANCE)
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), run_loras=loras, fuse_loras=fuse))
    with Engine(config) as engine:
        return engine.generate(request).latents


def _relative(ours, reference):
    assert ours.shape == reference.shape
    return ((ours - reference).abs().max() / reference.abs().max()).item()


@pytest.fixture(scope="module")
def reference(checkpoint, adapters):
    return _reference(checkpoint, adapters, SCALES)


def test_two_adapters_in_both_forms_equal_diffusers(checkpoint, adapters, reference):
    ours = _ours(checkpoint, [f"{adapters[0]}:{SCALES[0]}", {"path": str(adapters[1]), "scale": SCALES[1]}])
    assert _relative(ours, reference) <= 1e-4
    assert _relative(_reference(checkpoint), reference) > 1e-2  # the adapters change the video


def test_fused_adapters_equal_unfused(checkpoint, adapters, reference):
    """Fusing adds scale x B @ A (+ the diff_b bias) into each weight once: the same product in
    another order, so the latents move by float rounding only (the same 1e-4 bound)."""
    ours = _ours(checkpoint, [f"{adapters[0]}:{SCALES[0]}", f"{adapters[1]}:{SCALES[1]}"], fuse=True)
    assert _relative(ours, reference) <= 1e-4


@pytest.mark.slow
def test_a14b_adapter_on_both_experts_equals_diffusers(tmp_path_factory):
    checkpoint = _write_checkpoint(tmp_path_factory, "a14b")
    adapters = write_wan_adapters(checkpoint, tmp_path_factory.mktemp("a14b-loras"))
    reference = _reference(checkpoint, adapters[1:], [0.9], into_both=True)
    ours = _ours(checkpoint, [f"{adapters[1]}:0.9:both"])
    assert _relative(ours, reference) <= 1e-4
    only_first = _ours(checkpoint, [f"{adapters[1]}:0.9"])  # transformer only, diffusers' default
    assert _relative(only_first, reference) > 1e-3
    with pytest.raises(UserInputError, match="cannot be combined with idle_expert offload"):
        _load(checkpoint, f"{adapters[1]}:0.9:both", idle_expert="offload")


def _load(checkpoint, *loras, **options):
    from pipedit.adapter import load_adapter
    from pipedit.lora.inject import apply_loras

    return apply_loras(load_adapter(checkpoint, parts={"dit"}, **options), tuple(parse_lora(x) for x in loras))


def test_a_file_that_does_not_fit_names_its_first_unmatched_key(checkpoint, tmp_path):
    from safetensors.torch import save_file

    bad = tmp_path / "other-model.safetensors"
    save_file({"transformer.blocks.0.attn1.to_q.lora_A.weight": torch.zeros(2, 24),
               "transformer.blocks.0.attn1.to_q.lora_B.weight": torch.zeros(24, 2),
               "transformer.blocks.7.attn1.to_q.lora_A.weight": torch.zeros(2, 24),
               "transformer.blocks.7.attn1.to_q.lora_B.weight": torch.zeros(24, 2)}, str(bad))
    with pytest.raises(UserInputError, match=r"'transformer\.blocks\.7\.attn1\.to_q\.lora_A\.weight' matches no layer"):
        _load(checkpoint, str(bad))


def test_missing_files_other_formats_and_absent_experts_are_refused(checkpoint, adapters, tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        _load(checkpoint, str(tmp_path / "absent.safetensors"))
    pickled = tmp_path / "weights.bin"
    pickled.write_bytes(b"")
    with pytest.raises(UserInputError, match="only .safetensors"):
        _load(checkpoint, str(pickled))
    with pytest.raises(UserInputError, match="has no transformer_2"):
        _load(checkpoint, f"{adapters[0]}:1:transformer_2")


def test_a_diff_b_missing_on_some_layers_means_no_bias_delta_there(checkpoint, tmp_path):
    """diffusers gives every layer a LoRA bias once one has a diff_b; pipe.load_lora_weights then
    leaves the others' empty (meta) and fails at the first step. pipedit loads them zero: the file
    acts as the same file with zero diff_b on those layers."""
    from diffusers import WanTransformer3DModel
    from safetensors.torch import load_file, save_file

    model = WanTransformer3DModel.from_pretrained(checkpoint / "transformer")
    path = write_original_wan_lora(tmp_path / "partial.safetensors", model, WAN_ORIGINAL_LAYERS, rank=2, alpha=7, seed=4)
    tensors = load_file(str(path))
    tensors["diffusion_model.blocks.1.ffn.2.diff_b"].zero_()
    save_file(tensors, str(path))
    zero = dict(_load(checkpoint, str(path)).transformer.named_parameters())
    del tensors["diffusion_model.blocks.1.ffn.2.diff_b"]
    save_file(tensors, str(path))
    missing = dict(_load(checkpoint, str(path)).transformer.named_parameters())
    assert zero.keys() == missing.keys()
    assert all(torch.equal(zero[name], missing[name]) for name in zero)


def test_opensora_plan_refuses_adapters_naming_the_families_that_take_them(osp_demo, adapters):
    with pytest.raises(UserInputError, match="not available for opensora-plan; the families that take them: "
                                             "hunyuan-video, wan"):
        _load(osp_demo, str(adapters[0]))
