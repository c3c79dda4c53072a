"""--compile (pipedit.runtime.compile): the compiled denoise ranks against eager ones.

Tolerances. Inductor fuses the blocks' elementwise ops and reorders float32 reductions (layer
norms, modulation, gated residual sums), so compiled outputs differ from eager by rounding, not
bit for bit. HunyuanVideo: 1e-4 on final latents, the contract's bound for every parallel path
(measured: ~5e-7 on latents of size ~4). OpenSoraPlan: the same bound relative to the output's
size, as its parallel e2e test uses (its sampler amplifies one ulp of the model's output to
~1.5e-4 on final latents, see there); measured on one forward: ~3e-6 on outputs of size ~2.5.

Cost: inductor on 2 CPU cores pays ~13 s once per machine (vector-ISA probes, a precompiled
header; cached on disk after) and ~2 s per graph. The compiled graphs of a block class are shared
by its blocks and reused by later models of the same classes in the same process.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from e2e_helpers import Case, single_device_latents
from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig
from pipedit.distributed.spawn import run_on_gloo_ranks
from pipedit.errors import UserInputError
from pipedit.request import VideoRequest
from pipedit.runtime import compile as regional
from pipedit.runtime.engine import Engine
from pipedit.sampling import SamplingParams

PROBLEM = regional.compiler_problem(torch.device("cpu"))
needs_compiler = pytest.mark.skipif(PROBLEM is not None, reason=f"no inductor compiler: {PROBLEM}")

CASE = Case("a lighthouse at dusk", height=64, width=64, frames=5, steps=2, seed=5)


def _result(checkpoint, case: Case, compile: bool, cache: str | None = None) -> tuple[torch.Tensor, dict]:
    """(final latents, timings) of one request on one in-process rank. The configured shape is the
    request's: the engine's compile warm-up (a forward at the start) compiles what it runs."""
    request = VideoRequest(case.prompt, height=case.height, width=case.width, num_frames=case.frames,
                           steps=case.steps, seed=case.seed, cache=cache)
    shape = GenerationDefaults(height=case.height, width=case.width, num_frames=case.frames, steps=case.steps)
    with Engine(EngineConfig(model=ModelConfig(path=str(checkpoint), compile=compile), generation=shape)) as engine:
        assert engine.pipeline.compiled_keys == ({regional.graph_key(request)} if compile else None)  # warmed up
        result = engine.generate(request)
    return result.latents, result.timings


def _latents(checkpoint, case: Case, compile: bool) -> torch.Tensor:
    return _result(checkpoint, case, compile)[0]


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


@pytest.fixture(scope="module")
def eager_latents(demo_checkpoint):
    return single_device_latents(demo_checkpoint, CASE)


@needs_compiler
def test_hunyuan_compiled_equals_eager(demo_checkpoint, eager_latents):
    before = _graphs()
    latents = _latents(demo_checkpoint, CASE, compile=True)
    assert _graphs() > before  # inductor compiled graphs (equality alone would pass uncompiled)
    assert (latents - eager_latents).abs().max().item() <= 1e-4


@needs_compiler
def test_step_cache_wraps_the_compiled_blocks(demo_checkpoint):
    """Step caching wraps block forwards after compile (the worker's order): its decisions and
    skips run eagerly around the compiled forwards, the same steps skip as in eager, and the
    latents agree. A threshold far above the demo's distances (0.4-0.7) skips every step after
    the first, so rounding cannot flip a decision. Reuses the graphs compiled above."""
    case = replace(CASE, steps=3)
    results = [_result(demo_checkpoint, case, compile, cache="fbcache:5") for compile in (False, True)]
    (eager, eager_timings), (compiled, compiled_timings) = results
    assert eager_timings["cache_skipped"] == compiled_timings["cache_skipped"] == 2
    assert (compiled - eager).abs().max().item() <= 1e-4


@needs_compiler
@pytest.mark.slow
def test_hunyuan_video_15_compiled_equals_eager(tmp_path_factory):
    """HunyuanVideo 1.5's dual-stream blocks compiled around pipedit's attention processor, with
    guidance (both branches in one forward, a masked text key set: the empty negative prompt is
    shorter): the contract's 1e-4 relative to the latents' size."""
    from pipedit.integrations.hunyuan_video_15.demo_checkpoint import write_demo_checkpoint

    checkpoint = write_demo_checkpoint(tmp_path_factory.mktemp("hv15") / "demo")
    eager = _latents(checkpoint, CASE, compile=False)
    before = _graphs()
    compiled = _latents(checkpoint, CASE, compile=True)
    assert _graphs() > before
    assert (compiled - eager).abs().max().item() <= 1e-4 * eager.abs().max().item()


@needs_compiler
@pytest.mark.slow
def test_ltx2_compiled_equals_eager(tmp_path_factory):
    """LTX-2's joint blocks (video and audio streams, six attentions each) compiled around the
    attention processors, with every guidance pass (CFG batch, STG's value shortcut, the modality-
    isolated pass: other graphs of the same blocks): the contract's 1e-4 relative bound."""
    from pipedit.integrations.ltx2.demo_checkpoint import write_preset

    checkpoint = write_preset(tmp_path_factory.mktemp("ltx2") / "demo")
    case = Case("rain on a tin roof", height=32, width=64, frames=9, steps=2, seed=5)
    eager = _latents(checkpoint, case, compile=False)
    compiled = _latents(checkpoint, case, compile=True)
    assert (compiled - eager).abs().max().item() <= 1e-4 * eager.abs().max().item()


@needs_compiler
def test_ulysses_2_compiled_equals_eager(osp_demo):
    """OpenSoraPlan on two spawned gloo ranks (its Q/K/V overlap starts an all-to-all after each
    projection; Skiparse layers), one forward eager then compiled on each rank: the attention
    and its all-to-alls run eagerly between the compiled graphs. (The eager Ulysses forward
    equals the single device's: test_opensora_plan_parallel_e2e.) HunyuanVideo's Ulysses path
    compiles the same way; its numerics are covered on one rank above, to keep CI time down."""
    from compile_cases import ulysses_eager_then_compiled

    from pipedit.adapter import VideoShape

    shape = VideoShape(CASE.height, CASE.width, 9)  # 3 x 4 x 4 = 48 tokens, 24 per rank
    results = run_on_gloo_ranks(ulysses_eager_then_compiled, 2, str(osp_demo), shape, 1, timeout_s=300)
    for eager, compiled in results:
        assert (compiled - eager).abs().max().item() <= 1e-4 * eager.abs().max().item()


def test_attention_runs_outside_the_graphs(demo_checkpoint):
    """Dynamo traces the blocks but never an attention strategy (where collectives live): a
    strategy called while dynamo traces would see is_compiling() true. The eager backend keeps
    this test to tracing (no inductor)."""
    from pipedit.adapter import VideoShape, load_adapter

    adapter = load_adapter(demo_checkpoint)
    seen = []

    class Spy:
        def __init__(self, strategy):
            self.strategy = strategy

        def __call__(self, *args, **kwargs):
            seen.append(torch.compiler.is_compiling())
            return self.strategy(*args, **kwargs)

    for processor in adapter.transformer.attn_processors.values():
        if hasattr(processor, "strategy"):
            processor.strategy = Spy(processor.strategy)
    traced = []
    block = adapter.transformer.transformer_blocks[0]
    block.norm1.register_forward_pre_hook(lambda *_: traced.append(torch.compiler.is_compiling()))
    assert regional.compile_blocks(adapter.transformer, backend="eager") == 4  # 2 dual + 2 single blocks
    cond = adapter.prepare_condition(adapter.encode_prompt(CASE.prompt))
    shape = VideoShape(CASE.height, CASE.width, CASE.frames)
    latents = adapter.prepare_latents(shape, torch.Generator().manual_seed(0))
    adapter.predict_noise(latents, adapter.make_scheduler(SamplingParams(steps=2))[1][0], cond, 6.0)
    assert True in traced  # the blocks were traced...
    assert seen and not any(seen)  # ...and every attention call ran eagerly


class _CountingBackend:
    """Counts the graphs dynamo hands over and runs each as captured (what is counted is
    dynamo's compiles; inductor would only make them slower)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph, inputs):
        self.graphs += 1
        return graph.forward


def test_after_the_warm_up_a_new_prompt_length_compiles_nothing(demo_checkpoint):
    """HunyuanVideo sends only a prompt's valid text tokens, so prompts of other lengths reach the
    blocks at other text sizes. After the warm-up's two prompts (compile.WARM_UP_PROMPTS) the
    text dimension is dynamic: a third length at the warmed-up video shape compiles no graph (it
    would otherwise recompile inside an ordinary step, under a step's deadlines), and each
    forward equals the eager one. Control: after one prompt only, a new length does compile."""
    from pipedit.adapter import VideoShape, load_adapter

    eager = load_adapter(demo_checkpoint)
    shape = VideoShape(CASE.height, CASE.width, CASE.frames)
    latents = eager.prepare_latents(shape, torch.Generator().manual_seed(0))
    timestep = eager.make_scheduler(SamplingParams(steps=2))[1][0]
    prompts = (*regional.WARM_UP_PROMPTS, "a fox")

    def run(warm_ups: int) -> tuple[list[int], list[int]]:
        torch._dynamo.reset()  # graphs are per code object: a fresh start for each run
        adapter, counted = load_adapter(demo_checkpoint), _CountingBackend()
        regional.compile_blocks(adapter.transformer, backend=counted)
        graphs, lengths = [], []
        for prompt in prompts[:warm_ups] + prompts[-1:]:
            cond = adapter.prepare_condition(adapter.encode_prompt(prompt))
            lengths.append(adapter.text_length(cond))
            got = adapter.predict_noise(latents, timestep, cond, 6.0)
            expected = eager.predict_noise(latents, timestep, eager.prepare_condition(eager.encode_prompt(prompt)), 6.0)
            assert (got - expected).abs().max().item() <= 1e-5 * expected.abs().max().item()
            graphs.append(counted.graphs)
        return graphs, lengths

    graphs, lengths = run(warm_ups=2)
    assert len(set(lengths)) == 3  # three prompt lengths, one video shape
    assert graphs[0] > 0 and graphs[2] == graphs[1]
    control, _ = run(warm_ups=1)
    assert control[1] > control[0]


def test_the_compile_window_is_keyed_on_guidance_and_image_not_the_prompt():
    """The first-compile allowance (widened deadlines) opens for each new graph key: the video
    shape, one or two guidance branches, an image condition; a prompt of another length is
    the same key (its text dimension compiles dynamic)."""
    base = VideoRequest("a fox", height=64, width=64, num_frames=5, steps=2, guidance_scale=6.0)
    assert regional.graph_key(base) == regional.graph_key(replace(base, prompt="a fox in the snow at dawn"))
    assert regional.graph_key(base) != regional.graph_key(replace(base, guidance_scale=1.0))
    assert regional.graph_key(base) != regional.graph_key(replace(base, image=b"png"))
    assert regional.graph_key(base) != regional.graph_key(replace(base, height=96))


def test_no_compiler_is_an_error_naming_the_fix(monkeypatch):
    monkeypatch.setattr(regional, "compiler_problem", lambda device: "inductor needs a C++ compiler: install g++")
    with pytest.raises(UserInputError, match="install g\\+\\+.*or run without --compile"):
        regional.apply_compile(torch.nn.Linear(1, 1), torch.device("cpu"))


def test_blocks_wrapped_before_compile_are_refused():
    class Block(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Block(2, 2), Block(2, 2))
    model._repeated_blocks = ("Block",)
    model[1].forward = lambda x: x  # e.g. a step-cache wrapper installed first
    with pytest.raises(RuntimeError, match="apply compile before"):
        regional.compile_blocks(model)


def test_a_model_without_repeated_blocks_is_refused():
    with pytest.raises(UserInputError, match="no repeated blocks"):
        regional.compile_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_config_and_flags():
    from pipedit.cli import build_parser
    from pipedit.cli.flags import engine_config
    from pipedit.cli.serve import _config as serve_config

    with pytest.raises(UserInputError, match="model.compile must be true or false"):
        ModelConfig(compile="yes")
    parse = build_parser().parse_args
    generate = ["generate", "--prompt", "p", "--output", "o.mp4"]
    assert engine_config(parse([*generate, "--compile"])).model.compile is True
    assert engine_config(parse(generate)).model.compile is False
    assert engine_config(parse(["render", "prompts.txt", "--out-dir", "out", "--compile"])).model.compile is True
    assert serve_config(parse(["serve", "--compile"])).model.compile is True
    assert parse(["bench", "sp", "--compile"]).compile is True


def test_bench_attention_only_refuses_compile(capsys):
    from pipedit.cli import main

    assert main(["bench", "sp", "--attention-only", "--compile"]) == 2
    assert "leaves eager" in capsys.readouterr().err


def test_bench_sp_compile_summary():
    """bench sp --compile's summary (its model runs are bench sp's own, tested in test_bench_sp):
    compile time = first compiled forward - first eager forward; speedup = eager / compiled."""
    from pipedit.bench.sp import format_compile_summary

    eager = {None: {"chunk": None, "step_s": 0.2}, "single": {"chunk": None, "step_s": 0.3}}
    compiled = {None: {"chunk": None, "step_s": 0.1}, "single": {"chunk": None, "step_s": 0.4}}
    text = format_compile_summary(eager, compiled, {"sp": 0.5, "single": 1.0}, {"sp": 20.5, "single": 13.0})
    lines = [line.split() for line in text.splitlines()]
    assert lines[1] == ["sp", "0.50", "20.50", "20.00"] and lines[2] == ["single", "1.00", "13.00", "12.00"]
    assert lines[4] == ["sync", "ulysses", "200.00", "100.00", "2.000x"]
    assert lines[5] == ["single", "device", "300.00", "400.00", "0.750x"]
