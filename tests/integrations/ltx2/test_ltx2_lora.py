"""LoRA adapters on LTX-2: the forms pipedit reads (diffusers/PEFT through LTX2LoraLoaderMixin, the
original trainer form through pipedit's renames, integrations/ltx2/lora_names.py) land in the same
transformer layers as diffusers' own conversion puts them; adapters on the text connectors are
refused; and a per-request adapter (model.offered_loras, VideoRequest.loras) under Ulysses 2 equals
LTX2Pipeline after load_lora_weights + set_adapters on one device, with no adapter left on the
request after it.

Adapters (tests/lora_files.py): one set of matrices (rank 3) on LTX2_ORIGINAL_LAYERS written in each
form. Tolerance of the end-to-end case: the one-rank parity test's (test_ltx2_parity.py), 1e-4
relative on the unnormalised video and audio latents: both sides run the same fp32 peft layers on
CPU; Ulysses only moves tokens between ranks and one rank batches the guidance passes where the
pipeline does too, so they differ by matmul rounding only. The adapter moves the latents far beyond
that (checked)."""

import pytest
import torch
from reference_cache import cached
from test_ltx2_parity import FPS, FRAMES, HEIGHT, NEGATIVE, PROMPT, SEED, STEPS, WIDTH, _diffusers_kwargs, _unnormalised

from lora_files import LTX2_ORIGINAL_LAYERS, with_adapters, write_ltx2_adapter
from pipedit.errors import UserInputError
from pipedit.integrations.ltx2.demo_checkpoint import TEST_DIMS, write_demo_checkpoint
from pipedit.integrations.ltx2.lora_names import RENAMES
from pipedit.lora.forms import convert, split_key
from pipedit.lora.spec import parse_lora

RANK, ALPHA, GUIDANCE = 3, 5.0, 4.0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # The parity test's t2v checkpoint (the same bytes: its cached references serve both).
    return write_demo_checkpoint(tmp_path_factory.mktemp("ltx2") / "t2v", TEST_DIMS, preset="t2v")


@pytest.fixture(scope="module")
def adapters(checkpoint, tmp_path_factory):
    from diffusers import LTX2VideoTransformer3DModel

    model = LTX2VideoTransformer3DModel.from_pretrained(checkpoint / "transformer")
    folder = tmp_path_factory.mktemp("ltx2-loras")
    return {form: write_ltx2_adapter(folder / f"{form}.safetensors", model, form, RANK, ALPHA, seed=3)
            for form in ("peft", "original", "original-ab")}


def _loaded(checkpoint, *loras, fuse=False):
    from pipedit.adapter import load_adapter
    from pipedit.lora.inject import apply_loras

    adapter = load_adapter(checkpoint, parts={"dit"})
    return apply_loras(adapter, tuple(parse_lora(x) for x in loras), fuse=fuse).transformer


def test_peft_and_original_forms_read_into_the_same_layers(checkpoint, adapters):
    base = dict(_loaded(checkpoint).named_parameters())
    fused = {form: dict(_loaded(checkpoint, f"{adapters[form]}:0.9", fuse=True).named_parameters())
             for form in ("peft", "original")}
    for params in fused.values():
        changed = {name for name, param in params.items() if not torch.equal(param, base[name])}
        assert changed == {f"{layer}.weight" for layer in LTX2_ORIGINAL_LAYERS.values()}
    peft, original = fused["peft"], fused["original"]
    assert all(torch.allclose(peft[name], original[name], rtol=0, atol=1e-6) for name in peft)


def _layers_by_diffusers(tensors: dict) -> set[str]:
    """The layers (or parameters) diffusers' LTX-2 conversion names for an original-form state dict."""
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_ltx2_lora_to_diffusers

    return {split_key(key)[0] for key in _convert_non_diffusers_ltx2_lora_to_diffusers(tensors)}


def _original_pairs(model, names: dict) -> dict:
    """In-memory original-form pairs (lora_A/lora_B) on `names` (original -> diffusers layer)."""
    layers = dict(model.named_modules())
    tensors = {}
    for original, layer in names.items():
        linear = layers[layer]
        tensors[f"diffusion_model.{original}.lora_A.weight"] = torch.ones(RANK, linear.in_features)
        tensors[f"diffusion_model.{original}.lora_B.weight"] = torch.ones(linear.out_features, RANK)
    return tensors


def test_renames_agree_with_diffusers_conversion_on_ltx2_and_ltx23(checkpoint, adapters):
    """Every rename kind: the LTX-2 file (diffusers' loader reads it too; pipedit also in the kohya
    spelling, lora_unet_ and dots as underscores), LTX-2.3's prompt
    modulations and gated attention, and full deltas on norms and cross-attention tables."""
    from diffusers import LTX2VideoTransformer3DModel
    from safetensors.torch import load_file

    from pipedit.integrations.ltx2.demo_checkpoint import _transformer

    model = LTX2VideoTransformer3DModel.from_pretrained(checkpoint / "transformer")
    tensors = load_file(str(adapters["original-ab"]))
    ours = convert(tensors, {}, model, RENAMES, "ltx-2 file")
    assert set(ours.pairs) == _layers_by_diffusers(tensors) == set(LTX2_ORIGINAL_LAYERS.values())
    kohya = {}
    for key, tensor in tensors.items():
        name, part, _ = split_key(key)  # part: down or up
        kohya[f"lora_unet_{name.replace('.', '_')}.lora_{part}.weight"] = tensor
    assert set(convert(kohya, {}, model, RENAMES, "kohya file").pairs) == set(ours.pairs)

    model = _transformer(TEST_DIMS, "2.3")
    tensors = _original_pairs(model, {
        "prompt_adaln_single.linear": "prompt_adaln.linear",
        "audio_prompt_adaln_single.emb.timestep_embedder.linear_1": "audio_prompt_adaln.emb.timestep_embedder.linear_1",
        "transformer_blocks.1.audio_attn2.to_gate_logits": "transformer_blocks.1.audio_attn2.to_gate_logits"})
    blocks = model.transformer_blocks
    tensors["diffusion_model.transformer_blocks.0.attn1.q_norm.diff"] = torch.ones_like(blocks[0].attn1.norm_q.weight)
    tensors["diffusion_model.transformer_blocks.2.video_to_audio_attn.k_norm.diff"] = \
        torch.ones_like(blocks[2].video_to_audio_attn.norm_k.weight)
    tensors["diffusion_model.transformer_blocks.1.scale_shift_table_a2v_ca_video.diff"] = \
        torch.ones_like(blocks[1].video_a2v_cross_attn_scale_shift_table)
    ours = convert(tensors, {}, model, RENAMES, "ltx-2.3 file")
    # diffusers names a delta's layer (norm_q); pipedit the parameter it adds to (norm_q.weight).
    deltas = {name.removesuffix(".weight") for name in ours.deltas}
    assert set(ours.pairs) | deltas == _layers_by_diffusers(tensors)
    assert len(ours.pairs) == 3 and len(deltas) == 3


def test_adapters_on_the_text_connectors_or_a_second_transformer_are_refused(checkpoint, adapters, tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(adapters["peft"]))
    for connector_key in ("connectors.video_connector.transformer_blocks.0.attn1.to_q",
                          "text_embedding_projection.aggregate_embed"):
        path = tmp_path / f"{connector_key.partition('.')[0]}.safetensors"
        save_file({**tensors, f"{connector_key}.lora_A.weight": torch.zeros(RANK, 8),
                   f"{connector_key}.lora_B.weight": torch.zeros(8, RANK)}, str(path))
        with pytest.raises(UserInputError, match="LTX-2's text connectors .* transformer only"):
            _loaded(checkpoint, str(path))
    with pytest.raises(UserInputError, match="ltx-2 takes LoRA adapters into transformer, not transformer_2"):
        _loaded(checkpoint, f"{adapters['peft']}:1:both")


@pytest.mark.slow
def test_a_per_request_adapter_under_ulysses_equals_diffusers_and_does_not_leak(ray_session, checkpoint, adapters):
    """One engine (Ulysses 2) offering two adapters, the PEFT file and the original one diffusers
    also reads; a request with both (scales 0.8 and 1.2), then one with none: the first against
    LTX2Pipeline with load_lora_weights + set_adapters, the second against the plain pipeline
    (which the one-rank run equals: test_ltx2_parity.py). Its own engine, closed at the end: a
    pooled one would keep two of the session's Ray CPUs until the session ends."""
    from diffusers import LTX2Pipeline

    from pipedit.adapter import model_inputs
    from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime.engine import Engine

    chosen, files, scales = ("style", "trained"), (adapters["peft"], adapters["original-ab"]), (0.8, 1.2)

    def request(*loras):
        return VideoRequest(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                            steps=STEPS, seed=SEED, fps=FPS, guidance_scale=GUIDANCE, loras=loras)

    def reference(files, scales):
        pipe = with_adapters(LTX2Pipeline.from_pretrained(checkpoint), files, scales)
        output = cached(pipe, checkpoint)(
            prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, frame_rate=FPS,
            num_inference_steps=STEPS, generator=torch.Generator().manual_seed(SEED), output_type="latent",
            **_diffusers_kwargs(GUIDANCE, TEST_DIMS.layers))
        return pipe, (output.frames, output.audio)

    config = EngineConfig(model=ModelConfig(path=str(checkpoint), offered_loras=dict(zip(chosen, map(str, files)))),
                          parallel=ParallelConfig(ulysses=2))
    with Engine(config) as engine:
        results = list(engine.generate_many([request(*zip(chosen, scales)), request()]))
    grid = model_inputs(checkpoint).grid(request().shape)
    with_both, plain = reference(files, scales), reference((), ())
    for result, (pipe, expected) in zip(results, (with_both, plain)):
        for ours, theirs in zip(_unnormalised(pipe, result.latents, grid), expected):
            assert ours.shape == theirs.shape
            assert (ours - theirs).abs().max().item() <= 1e-4 * theirs.abs().max().item()
    for moved, still in zip(with_both[1], plain[1]):  # the adapters change the video and the sound
        assert (moved - still).abs().max().item() > 1e-2 * still.abs().max().item()
