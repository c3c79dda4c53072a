"""`pipedit bench latency`: a tiny real run (demo model, 2 Ray/gloo ranks) checks that the report
is complete and self-consistent (slow: three engines start, ~1-2 min on 2 cores); flag errors; the
method layouts. No timing assertions."""

import json

import pytest

from pipedit.bench.environment import interconnect
from pipedit.bench.methods import method_parallel, total_ranks
from pipedit.cli import main
from pipedit.config import ParallelConfig
from pipedit.errors import UserInputError

PROMPTS, STEPS = 2, 2
METHODS = ["base", "dedivae", "aco"]


@pytest.fixture(scope="module")
def tiny_run(ray_session, demo_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("latency")
    code = main(["bench", "latency", "--model-path", str(demo_checkpoint), "--resolutions", "64x64", "--frames", "5",
                 "--steps", str(STEPS), "--prompts", str(PROMPTS), "--methods", ",".join(METHODS), "--ranks", "2",
                 "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "latency.json").read_text())


@pytest.mark.slow
def test_every_cell_is_present_and_consistent(tiny_run):
    _, report = tiny_run
    assert [c["method"] for c in report["cells"]] == METHODS
    for cell in report["cells"]:
        assert (cell["width"], cell["height"], cell["frames"], cell["steps"]) == (64, 64, 5, STEPS)
        assert cell["prompts"] == PROMPTS and cell["ranks"] == 2 and cell["failures"] == []
        requests = cell["per_request_s"]
        assert len(requests) == PROMPTS and requests == sorted(requests) and requests[0] > 0
        assert cell["batch_time_s"] >= max(requests)
        step = cell["per_step_s"]
        assert 0 < step["median"] and 0 < step["mean"]
        # Denoising is serial on the denoise group: every step of the batch fits in the batch time.
        assert step["mean"] * STEPS * PROMPTS <= cell["batch_time_s"]
        assert set(cell["peak_memory_bytes"]) == {"rank0", "rank1"}
        assert all(value > 0 for value in cell["peak_memory_bytes"].values())
        assert cell["peak_memory_kind"] == "process_peak_rss"
        assert set(cell["layout"]) >= {"ulysses", "ring", "decode_ranks", "pipesp_chunk", "aco"}


@pytest.mark.slow
def test_each_method_ran_its_layout(tiny_run):
    _, report = tiny_run
    cells = {c["method"]: c for c in report["cells"]}
    base, dedivae, aco = cells["base"]["layout"], cells["dedivae"]["layout"], cells["aco"]["layout"]
    assert (base["ulysses"], base["decode_ranks"], base["pipesp_chunk"], base["aco"]) == (2, 0, None, False)
    assert (dedivae["ulysses"], dedivae["decode_ranks"], dedivae["aco"]) == (1, 1, False)
    assert (aco["ulysses"], aco["decode_ranks"], aco["aco"]) == (1, 1, True)
    assert cells["base"]["aco_steps"] == cells["dedivae"]["aco_steps"] == 0
    assert cells["aco"]["aco_steps"] > 0  # the first request denoises while no decode is in flight


@pytest.mark.slow
def test_environment_and_settings(tiny_run):
    _, report = tiny_run
    env, settings = report["environment"], report["settings"]
    assert env["versions"]["torch"] and env["versions"]["diffusers"] and env["cpu_count"] >= 1
    assert env["device_type"] == "cpu" and env["gpus"] == [] and env["interconnect"] == "unknown"
    assert settings["resolutions"] == ["64x64"] and settings["methods"] == METHODS
    assert "not counted" in settings["warmup"] and "VmHWM" in settings["peak_memory"]


@pytest.mark.slow
def test_step_rates_are_the_cost_models_flops_over_the_reported_times(tiny_run, demo_checkpoint):
    from pipedit.bench.rates import model_spec, step_flops

    _, report = tiny_run
    matmul = report["matmul"]  # measured once, on the first method's rank 0 (a Ray actor), not in the driver
    assert (matmul["rank"], matmul["device"], matmul["dtype"]) == (0, "cpu", "float32") and matmul["flops_per_s"] > 0
    step = step_flops(model_spec(demo_checkpoint), 64, 64, 5, 1)  # the demo HunyuanVideo: one forward per step
    for cell in report["cells"]:
        assert cell["flops"] == {"per_step": step, "cfg_branches": 1.0}
        ranks = cell["layout"]["ulysses"] * cell["layout"]["ring"]
        assert cell["denoise_ranks"] == ranks
        median, denoise = cell["achieved"]["per_step_median"], cell["achieved"]["denoise_mean"]
        assert (median["flops"], median["seconds"], median["devices"]) == (step, cell["per_step_s"]["median"], ranks)
        assert (denoise["flops"], denoise["seconds"]) == (STEPS * step, cell["phase_s"]["denoise"])
        for figures in (median, denoise):
            rate = figures["flops"] / figures["seconds"] / ranks
            assert figures["tflops"] == pytest.approx(rate / 1e12)
            assert figures["of_matmul"] == pytest.approx(rate / matmul["flops_per_s"])


@pytest.mark.slow
def test_markdown_and_png(tiny_run):
    out, report = tiny_run
    rows = [line for line in (out / "latency.md").read_text().splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(report["cells"])  # the header, then one row per cell
    assert [row.split("|")[1].strip() for row in rows[1:]] == METHODS
    tflops = {row.split("|")[-3].strip() for row in rows[1:]}  # the step TFLOP/s column
    assert all(float(value) > 0 for value in tflops)
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags, message", [
    (["--resolutions", "480-352"], "'480-352' is not WxH"),
    (["--frames", "0"], "--frames must be comma-separated integers >= 1"),
    (["--steps", "ten"], "--steps must be comma-separated integers >= 1"),
])
def test_bad_flags_say_what_is_allowed(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "latency", *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--methods", "base,fast"], "allowed: base, pipesp, dedivae, aco, all"),
    (["--methods", "base,base"], "lists a method twice"),
    (["--frames", "6"], "num_frames must be 4*k+1"),
    (["--resolutions", "60x64"], "multiples of"),
    (["--methods", "dedivae", "--ranks", "1"], "needs at least 2 ranks"),
    (["--prompts", "0"], "--prompts must be at least 1"),
])
def test_bad_values_fail_before_any_rank_starts(flags, message, demo_checkpoint, tmp_path, capsys):
    code = main(["bench", "latency", "--model-path", str(demo_checkpoint), "--resolutions", "64x64", "--frames", "5",
                 "--steps", "1", "--out", str(tmp_path / "out"), *flags])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_method_layouts_on_three_ranks():
    config = ParallelConfig(ulysses=2, decode_ranks=1)
    assert total_ranks(config) == 3
    layouts = {m: method_parallel(m, config, 3, heads=4) for m in ("base", "pipesp", "dedivae", "aco", "all")}
    summary = {m: (p.ulysses, p.ring, p.decode_ranks, p.pipesp_chunk, p.aco) for m, p in layouts.items()}
    assert summary == {"base": (3, 1, 0, "off", "off"), "pipesp": (3, 1, 0, "auto", "off"),
                       "dedivae": (2, 1, 1, "off", "off"), "aco": (2, 1, 1, "off", "on"),
                       "all": (2, 1, 1, "auto", "on")}


def test_method_layouts_without_decode_ranks_use_the_balance_rule():
    parallel = method_parallel("dedivae", ParallelConfig(ulysses=4), 4, heads=4)
    assert (parallel.decode_ranks, parallel.ranks) == ("auto", 4)
    assert method_parallel("base", ParallelConfig(ulysses=4, pipesp_chunk=2), 4, heads=4).pipesp_chunk == "off"
    assert method_parallel("pipesp", ParallelConfig(ulysses=4, pipesp_chunk=2), 4, heads=4).pipesp_chunk == 2
    with pytest.raises(UserInputError, match="leaves no denoise rank"):
        method_parallel("dedivae", ParallelConfig(ulysses=1, decode_ranks=2), 2, heads=4)


def test_interconnect_from_topology():
    nvlink = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
    pcie = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n"
    assert interconnect(nvlink, 2) == "nvlink"
    assert interconnect(pcie, 2) == "pcie"
    assert interconnect("nvidia-smi not found", 0) == "unknown"
    assert interconnect("", 1) == "single GPU"


def test_base_offload_moves_nothing_on_cpu(demo_checkpoint):
    from pipedit.config import EngineConfig, ModelConfig
    from pipedit.runtime.engine import Engine

    with Engine(EngineConfig(model=ModelConfig(path=str(demo_checkpoint), device="cpu"))) as engine:
        assert engine.executor.call("set_offload_idle", True) == [False]  # reported as offload_idle false


def test_a_model_with_sound_and_guidance_passes_on_one_rank(tmp_path):
    """LTX-2 (the demo, in process): a step runs four guidance passes (CFG's two, STG, modality
    isolation), which the step rates count."""
    from pipedit.bench.rates import model_spec, step_flops
    from pipedit.integrations.ltx2.demo_checkpoint import write_demo_checkpoint

    checkpoint = write_demo_checkpoint(tmp_path / "ltx2")
    assert main(["bench", "latency", "--model-path", str(checkpoint), "--resolutions", "64x32", "--frames", "9",
                 "--steps", "2", "--prompts", "1", "--methods", "base", "--ranks", "1", "--out", str(tmp_path / "out")]) == 0
    [cell] = json.loads((tmp_path / "out" / "latency.json").read_text())["cells"]
    assert cell["failures"] == [] and cell["layout"]["strategy"] == "none"
    assert cell["flops"] == {"per_step": step_flops(model_spec(checkpoint), 32, 64, 9, 4), "cfg_branches": 4.0}
