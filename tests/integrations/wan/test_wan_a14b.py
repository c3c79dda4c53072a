"""Wan2.2 A14B (two experts: `transformer` while t >= boundary_ratio * num_train_timesteps,
`transformer_2` after, guidance_scale_2 for the latter) through pipedit's engine against diffusers'
WanPipeline and WanImageToVideoPipeline, on tiny random checkpoints with other sizes than the demo
(3 heads of 8, text width 24) whose two experts have different weights.

Tolerance: both sides run the same fp32 modules on the same CPU; pipedit batches the [negative,
positive] branches in one forward where diffusers runs two, which may move the last float bits, so
final latents are compared at the contract's 1e-4 relative (max |diff| / max |reference|).
"""

import io

import numpy as np
import pytest
import torch
from PIL import Image

from pipedit.adapter import UnsupportedInputError
from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import InvalidRequestError, UserInputError
from pipedit.images import load_image
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from reference_cache import cached

PROMPT = "two  cats boxing &amp;amp; a referee"
HEIGHT, WIDTH, FRAMES, STEPS = 32, 48, 5, 4  # 4 UniPC steps: timesteps 999, 900, 750, 500


def _write(tmp_path_factory, preset):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    dims = WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=13)
    return write_demo_checkpoint(tmp_path_factory.mktemp(preset) / "tiny", dims, preset=preset)


@pytest.fixture(scope="module")
def tiny_a14b(tmp_path_factory):
    return _write(tmp_path_factory, "a14b")  # boundary_ratio 0.875


@pytest.fixture(scope="module")
def engine(tiny_a14b):
    with Engine(EngineConfig(model=ModelConfig(path=str(tiny_a14b)))) as engine:
        yield engine


def _relative(ours, reference):
    assert ours.shape == reference.shape
    return ((ours - reference).abs().max() / reference.abs().max()).item()


def _run(pipe, seed, guidance_scale_2, **inputs):
    pipe.set_progress_bar_config(disable=True)
    return pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                guidance_scale=4.0, guidance_scale_2=guidance_scale_2, output_type="latent",
                generator=torch.Generator("cpu").manual_seed(seed), **inputs).frames


def _request(**options):
    return VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=STEPS, guidance_scale=4.0,
                        seed=5, **options)


def test_a14b_latents_equal_diffusers_and_both_experts_run(engine, tiny_a14b):
    from diffusers import WanPipeline

    experts = engine.executor.worker.adapter.expert_set
    before = list(experts.uses)
    low_guidance = engine.generate(_request(guidance_scale_2=2.0))
    ran = [after - first for after, first in zip(experts.uses, before)]
    same_guidance = engine.generate(_request())
    pipe = cached(WanPipeline.from_pretrained(tiny_a14b), tiny_a14b)
    reference_low, reference_same = _run(pipe, 5, 2.0), _run(pipe, 5, None)
    assert ran == [2, 2]  # 999 and 900 >= 875 on transformer, 750 and 500 on transformer_2
    assert _relative(low_guidance.latents, reference_low) <= 1e-4
    assert _relative(same_guidance.latents, reference_same) <= 1e-4
    assert _relative(reference_low, reference_same) > 1e-3  # guidance_scale_2 matters (10x the bound)
    # transformer_2 matters: the high-noise expert alone gives other latents.
    pipe.transformer_2 = pipe.transformer
    assert _relative(_run(pipe, 5, 2.0), reference_low) > 1e-3


def test_wan22_i2v_a14b_latents_equal_diffusers(tmp_path_factory):
    from diffusers import WanImageToVideoPipeline

    path = _write(tmp_path_factory, "i2v-a14b")  # no image encoder, boundary_ratio 0.9
    buffer = io.BytesIO()
    Image.fromarray((np.random.RandomState(1).rand(40, 40, 3) * 255).astype("uint8")).save(buffer, format="WEBP")
    with Engine(EngineConfig(model=ModelConfig(path=str(path)))) as engine:
        ours = engine.generate(_request(guidance_scale_2=3.0, negative_prompt="static", image=buffer.getvalue()))
        assert engine.executor.worker.adapter.expert_set.uses == [2, 2]  # 999, 900 | 750, 500
    reference = _run(cached(WanImageToVideoPipeline.from_pretrained(path), path), 5, 3.0, negative_prompt="static",
                     image=load_image(buffer.getvalue()))
    assert _relative(ours.latents, reference) <= 1e-4


def test_guidance_scale_2_below_one_under_guidance_is_refused(engine):
    with pytest.raises(UnsupportedInputError, match="use 1 \\(no guidance for the low-noise expert\\)"):
        engine.generate(_request(guidance_scale_2=0.5))


def test_step_caching_is_refused_for_two_experts(engine):
    with pytest.raises(InvalidRequestError, match="two-expert Wan2.2 checkpoints; use cache none"):
        engine.generate(_request(cache="fbcache:0.1"))


def test_expert_choice_and_step_guidance_follow_diffusers():
    from pipedit.integrations.wan.experts import Experts

    experts = Experts([torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)], 875.0, torch.device("cpu"))
    assert [experts.index_for(torch.tensor(t)) for t in (999, 875, 874.9, 0)] == [0, 0, 1, 1]
    assert experts.guidance_scale(torch.tensor(999), 4.0, 3.0) == 4.0
    assert experts.guidance_scale(torch.tensor(500), 4.0, 3.0) == 3.0
    assert experts.guidance_scale(torch.tensor(500), 4.0, None) == 4.0  # None: guidance_scale
    assert experts.guidance_scale(torch.tensor(500), 1.0, 3.0) == 1.0  # no guidance decided by guidance_scale


def test_idle_expert_is_validated_and_offload_moves_nothing_on_cpu():
    from pipedit.integrations.wan.experts import Experts

    from pipedit.cli import build_parser
    from pipedit.cli.flags import engine_config

    with pytest.raises(UserInputError, match="model.idle_expert must be one of resident, offload"):
        ModelConfig(idle_expert="gpu")
    args = build_parser().parse_args(["generate", "--prompt", "x", "--output", "x.mp4", "--idle-expert", "offload"])
    assert engine_config(args).model.idle_expert == "offload"
    experts = Experts([torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)], 875.0, torch.device("cpu"), "offload")
    assert not experts.offload  # on a CPU device the host is the device


def test_offload_points_the_idle_expert_at_its_mapped_files_and_copies_nothing_out(tiny_a14b):
    """model.idle_expert offload with the checkpoint's files mapped (pipedit.mapped_weights): the
    idle expert's tensors are views of its file's one mapping (one host copy per expert, shared by
    every rank through the page cache), a swap allocates no host tensor for the expert leaving, and
    the expert coming back has its own weights in its compute dtype. The device is `meta`, so that
    a CPU test sees the host side of a swap alone (a CUDA run: see the note of issue 34)."""
    from diffusers import WanTransformer3DModel

    from pipedit.integrations.wan.experts import Experts
    from pipedit.mapped_weights import mapped

    names = ("transformer", "transformer_2")
    modules = [WanTransformer3DModel.from_pretrained(tiny_a14b / name, torch_dtype=torch.bfloat16) for name in names]
    reference = [{k: v.clone() for k, v in m.state_dict().items()} for m in modules]
    homes = [mapped(tiny_a14b / name, module) for name, module in zip(names, modules)]
    assert all(home is not None and len(home) == len(module.state_dict()) for home, module in zip(homes, modules))

    def storages(module):
        return {p.untyped_storage().data_ptr() for p in module.parameters()}

    def mapping(index):
        return {v.untyped_storage().data_ptr() for v in homes[index].values()}

    modules[0].to("meta")  # stands in for the device the high-noise expert starts on
    experts = Experts(modules, 875.0, torch.device("meta"), "offload", homes)
    assert experts.offload and storages(modules[1]) == mapping(1) and len(mapping(1)) == 1
    experts.for_timestep(torch.tensor(100.0))  # the low-noise expert's step: a swap
    assert storages(modules[0]) == mapping(0) and all(p.is_meta for p in modules[1].parameters())
    assert all(b.is_meta for b in modules[1].buffers())  # rotary tables, loaded on the host, came along
    for name, value in modules[0].state_dict().items():  # the expert left as its file holds it
        assert torch.equal(value.to(reference[0][name].dtype), reference[0][name]), name
    experts.for_timestep(torch.tensor(900.0))  # and back
    assert storages(modules[1]) == mapping(1) and all(p.is_meta for p in modules[0].parameters())
    # Each tensor in its compute dtype again (diffusers keeps some in float32, e.g. scale_shift_table).
    assert {k: v.dtype for k, v in modules[0].state_dict().items()} == {k: v.dtype for k, v in reference[0].items()}
    assert experts.uses == [1, 1]


def test_the_idle_expert_is_built_onto_its_mapped_files_without_a_host_copy(tiny_a14b):
    """Offload on a GPU loads the idle expert straight onto its mapping: no parameter is ever read
    into the rank's own memory (at 14B that was 26.6 GiB per denoise rank while loading). Its
    tensors are views of the file's mapping, hold the file's weights, and carry the dtypes
    diffusers gives them (bf16, scale_shift_table in float32), taken from the other expert; the
    rotary tables, outside the files, are computed. Experts then swaps it as any mapped expert."""
    from diffusers import WanTransformer3DModel

    from pipedit.integrations.wan.experts import Experts, mapped_idle_expert

    load = WanTransformer3DModel.from_pretrained
    first, reference = (load(tiny_a14b / name, torch_dtype=torch.bfloat16) for name in ("transformer", "transformer_2"))
    idle, home = mapped_idle_expert(tiny_a14b / "transformer_2", first)
    mapping = {view.untyped_storage().data_ptr() for view in home.values()}
    assert all(p.is_meta for p in idle.parameters())  # nothing read yet: Experts binds the mapping
    assert {k: v.dtype for k, v in idle.state_dict().items()} == {k: v.dtype for k, v in reference.state_dict().items()}
    assert torch.float32 in {p.dtype for p in idle.parameters()} and torch.bfloat16 in {p.dtype for p in idle.parameters()}
    first.to("meta")  # stands in for the device
    Experts([first, idle], 875.0, torch.device("meta"), "offload", [None, home])
    assert {p.untyped_storage().data_ptr() for p in idle.parameters()} <= mapping and len(mapping) == 1
    expected = reference.state_dict()
    for name, value in idle.state_dict().items():  # the file's weights (and the computed rotary tables)
        assert torch.equal(value.to(expected[name].dtype), expected[name]), name
    different = WanTransformer3DModel.from_config({**dict(reference.config), "num_layers": 1})
    assert mapped_idle_expert(tiny_a14b / "transformer_2", different) is None  # experts that differ: load it


def test_generate_flag_guidance_scale_2_reaches_the_low_noise_expert(engine, tiny_a14b, tmp_path, capsys):
    """`pipedit generate --guidance-scale-2` gives the engine's guidance_scale_2 run (same process,
    same modules: equal within float rounding, 1e-6) and not the run without it."""
    from pipedit.cli import main

    latents_file = tmp_path / "latents.pt"
    assert main(["generate", "--model-path", str(tiny_a14b), "--prompt", PROMPT, "--height", str(HEIGHT),
                 "--width", str(WIDTH), "--num-frames", str(FRAMES), "--steps", str(STEPS), "--seed", "5",
                 "--guidance-scale", "4", "--guidance-scale-2", "2", "--output", str(tmp_path / "out.mp4"),
                 "--save-latents", str(latents_file)]) == 0
    ours = torch.load(latents_file)
    assert _relative(ours, engine.generate(_request(guidance_scale_2=2.0)).latents) <= 1e-6
    assert _relative(ours, engine.generate(_request()).latents) > 1e-3


def test_aco_messages_keep_the_compute_dtype_after_a_swap(tiny_a14b):
    """Aco helpers size their receive buffers by AcoShape.dtype. After a request ends on the
    low-noise expert, offload has pointed the high-noise one at its files (float32 in the demo)
    while the experts compute in bf16: the shape must still say bf16 (the file dtype made the
    helpers wait for twice the bytes the senders send, until the operation deadline)."""
    from types import SimpleNamespace

    from pipedit.integrations.wan.adapter import WanAdapter
    from pipedit.integrations.wan.experts import Experts
    from pipedit.mapped_weights import mapped
    from pipedit.runtime.worker import DenoiseWorker

    adapter = WanAdapter.from_pretrained(tiny_a14b, parts={"dit"}, dtype=torch.bfloat16)
    modules = adapter.experts
    homes = [mapped(tiny_a14b / name, module) for name, module in zip(("transformer", "transformer_2"), modules)]
    modules[0].to("meta")  # stands in for the device
    adapter.expert_set = Experts(modules, 875.0, torch.device("meta"), "offload", homes)
    adapter.expert_set.for_timestep(torch.tensor(100.0))  # the low-noise expert's step: a swap
    assert adapter.transformer.dtype == torch.float32  # the idle expert reports its files' dtype
    worker = DenoiseWorker.__new__(DenoiseWorker)
    worker.adapter, worker.job = adapter, SimpleNamespace(cond={"prompt_embeds": torch.zeros(1, 512, 24)})
    assert worker.aco_shape(_request()).dtype == torch.bfloat16


def test_compiled_experts_swap_to_their_files_and_back(tiny_a14b):
    """--compile with idle_expert offload: a compiled expert's parameters are swapped
    (torch.utils.swap_tensors) to its mapped files and back, and it still gives the eager
    output. Some torch versions' dynamo guards keep weak references that swap_tensors refuses;
    this runs on whatever torch is installed: where the probe says this torch refuses, the swap
    must indeed fail and the start refuses the combination naming the torch version. The swap
    runs on the host (a CPU has no offload of its own: Experts' swap steps are called directly)."""
    from diffusers import WanTransformer3DModel

    from pipedit.integrations.wan.adapter import WanAdapter
    from pipedit.integrations.wan.experts import Experts, swap_after_compile_problem
    from pipedit.mapped_weights import mapped
    from pipedit.runtime.compile import compile_blocks, compiler_problem

    names = ("transformer", "transformer_2")
    modules = [WanTransformer3DModel.from_pretrained(tiny_a14b / name) for name in names]
    eager = WanTransformer3DModel.from_pretrained(tiny_a14b / "transformer")
    experts = Experts(modules, 875.0, torch.device("cpu"), "resident", [mapped(tiny_a14b / n, m) for n, m in
                                                                        zip(names, modules)])
    backend = "inductor" if compiler_problem(torch.device("cpu")) is None else "aot_eager"
    compile_blocks(modules[0], backend=backend)
    generator = torch.Generator().manual_seed(3)
    inputs = dict(hidden_states=torch.randn(1, modules[0].config.in_channels, 2, 4, 6, generator=generator),
                  timestep=torch.tensor([900]), encoder_hidden_states=torch.randn(1, 7, 24, generator=generator),
                  return_dict=False)
    with torch.no_grad():
        expected, first = eager(**inputs)[0], modules[0](**inputs)[0]
        problem = swap_after_compile_problem()
        if problem is not None:
            with pytest.raises(RuntimeError):
                experts._send_home(0)
            adapter = WanAdapter.from_pretrained(tiny_a14b, parts={"dit"})
            adapter.expert_set.offload = True  # as on a GPU
            with pytest.raises(UserInputError, match=f"idle_expert offload here: torch {torch.__version__}"):
                adapter.check_compile()
            return
        experts._send_home(0)  # its parameters now views of its files
        mapping = {view.untyped_storage().data_ptr() for view in experts.homes[0].values()}
        assert {p.untyped_storage().data_ptr() for p in modules[0].parameters()} == mapping
        experts._bring(0)  # and back, copied out in its compute dtype
        again = modules[0](**inputs)[0]
    for got in (first, again):
        assert (got - expected).abs().max().item() <= 1e-5 * expected.abs().max().item()


def test_compile_with_offload_is_refused_at_start_where_torch_refuses_the_swap(tiny_a14b, monkeypatch):
    """Where swap_after_compile_problem finds this torch refusing, the rank's start refuses the
    combination with the reason and the torch version (the refusal itself, on any torch)."""
    from pipedit.integrations.wan import adapter as wan

    adapter = wan.WanAdapter.from_pretrained(tiny_a14b, parts={"dit"})
    adapter.check_compile()  # resident (a CPU never offloads): nothing to swap
    adapter.expert_set.offload = True  # as on a GPU
    reason = f"torch {torch.__version__} refuses to swap a compiled module's parameters (weakref)"
    monkeypatch.setattr(wan, "swap_after_compile_problem", lambda: reason)
    with pytest.raises(UserInputError, match=r"--compile cannot be combined with idle_expert offload here: torch .* "
                                             r"refuses.*Use idle_expert resident, run without --compile"):
        adapter.check_compile()
