"""The planner's Wan specs (pipedit.integrations.wan.release, .vae_cost): parameter counts from the released dims
against the released sizes and against diffusers' / transformers' modules built from the same
configs; plans for wan-14b and wan-a14b; the idle expert's memory; the causal VAE's decode bound
against diffusers' own decode counted on fake tensors."""

from dataclasses import replace

import pytest
import torch

from pipedit.cli import main
from pipedit.integrations.wan import release as wan
from pipedit.planner.cost import Shape
from pipedit.planner.hardware import node
from pipedit.planner.memory import denoise_rank_bytes
from pipedit.planner.models import full_size
from pipedit.planner.search import Problem, candidates, rank

SHAPE_720P = Shape(720, 1280, 81)


@pytest.mark.parametrize("release, size, tolerance", [
    # The "1.3B" release counts 1.42e9 parameters (its name rounds down): 10% covers it, not more.
    ("wan-1.3b", 1.3e9, 0.10), ("wan-14b", 14e9, 0.03), ("wan-a14b", 14e9, 0.03), ("wan-ti2v-5b", 5e9, 0.03)])
def test_parameter_counts_from_the_dims_are_the_released_sizes(release, size, tolerance):
    spec = full_size(release)
    assert spec.dit_params == pytest.approx(size, rel=tolerance)
    assert spec.experts == (2 if release == "wan-a14b" else 1)
    assert spec.text_params == pytest.approx(5.7e9, rel=0.02)  # UMT5-XXL's encoder


def test_parameter_formulas_equal_the_modules_built_from_the_configs():
    """Exact: each formula walks the module layer by layer (meta device: no memory, ~3 s)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import CLIPVisionConfig, CLIPVisionModel, UMT5Config, UMT5EncoderModel

    def count(module):
        return sum(p.numel() for p in module.parameters())

    i2v = {**wan.TRANSFORMERS["wan-14b"], "in_channels": 36, "image_dim": 1280, "added_kv_proj_dim": 5120}
    with torch.device("meta"):
        for config in (wan.TRANSFORMERS["wan-1.3b"], wan.TRANSFORMERS["wan-ti2v-5b"], i2v):
            assert wan.transformer_params(config) == count(WanTransformer3DModel.from_config(config))
        for vae in (wan.VAE_21, wan.VAE_22):
            stats = {"latents_mean": [0.0] * vae["z_dim"], "latents_std": [1.0] * vae["z_dim"]}
            assert wan.vae_params(vae) == count(AutoencoderKLWan.from_config({**vae, **stats}))
        umt5 = {k: v for k, v in wan.UMT5_XXL.items() if k not in ("model_type", "architectures")}
        assert wan.umt5_params(wan.UMT5_XXL) == count(UMT5EncoderModel(UMT5Config(**umt5)))
        clip = {k: v for k, v in wan.CLIP_VIT_H.items() if k != "model_type"}
        assert wan.clip_vision_params(wan.CLIP_VIT_H) == count(CLIPVisionModel(CLIPVisionConfig(**clip)))


def test_the_idle_expert_offloaded_holds_one_expert_and_pays_swaps():
    model = full_size("wan-a14b")
    resident = denoise_rank_bytes(model, SHAPE_720P, 8, 1, False, False, False, "resident")
    offload = denoise_rank_bytes(model, SHAPE_720P, 8, 1, False, False, False, "offload")
    # What the difference is: one expert's bf16 weights, with the allocator allowance.
    assert resident - offload == pytest.approx(1.1 * model.dit_params * 2)
    one = full_size("wan-14b")
    assert offload == pytest.approx(denoise_rank_bytes(one, SHAPE_720P, 8, 1, False, False, False))
    problem = Problem(model, node("h100", 8, "nvlink"), SHAPE_720P, 40, 2)
    by_idle = {c.idle_expert: c for c in candidates(model, 8) if (c.decode_ranks, c.ulysses, c.chunk) == (1, 7, None)
               and not c.aco}
    from pipedit.planner.search import predict

    res, off = predict(problem, by_idle["resident"]), predict(problem, by_idle["offload"])
    assert res.peak_bytes > off.peak_bytes and res.batch_s < off.batch_s
    assert all(c.idle_expert == "resident" for c in candidates(full_size("wan-14b"), 8))
    assert not any(c.tiled for c in candidates(model, 8))  # Wan decodes untiled only


def test_a14b_at_720p_on_80gb_fits_resident_only_beside_decode_ranks():
    """Both experts and UMT5 on one GPU exceed 80 GB; the text encoder on a decode rank fits."""
    fitting, too_big = rank(Problem(full_size("wan-a14b"), node("h100", 8, "nvlink"), SHAPE_720P, 40, 4))
    assert any(x.candidate.idle_expert == "resident" and x.candidate.decode_ranks == 0 for x in too_big)
    assert all(x.candidate.decode_ranks > 0 for x in fitting if x.candidate.idle_expert == "resident")
    assert any(x.candidate.idle_expert == "offload" and x.candidate.decode_ranks == 0 for x in fitting)


def test_plan_runs_for_wan_14b_and_a14b(tmp_path, capsys):
    from pipedit.config import load_config

    assert main(["plan", "--model", "wan-14b", "--gpus", "8", "--height", "720", "--width", "1280", "--frames", "81",
                 "--steps", "50", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Wan2.1 T2V 14B on 8x H100") and "idle exp." not in text
    out = tmp_path / "best.yaml"
    assert main(["plan", "--model", "wan-a14b", "--gpus", "8", "--gpu", "l40", "--height", "720", "--width", "1280",
                 "--frames", "81", "--steps", "40", "--idle-expert", "offload", "--top", "3", "--write", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert rows and all(row.endswith(" offload") for row in rows)
    config = load_config(out)
    assert (config.model.name, config.model.idle_expert, config.model.vae_tiling) == ("wan", "offload", "off")
    assert main(["plan", "--model", "wan-14b", "--idle-expert", "offload"]) == 2
    assert "two-expert" in capsys.readouterr().err
    assert main(["plan", "--model", "wan-ti2v-5b", "--height", "720", "--width", "1280", "--frames", "81"]) == 2
    assert "multiples of 32" in capsys.readouterr().err


def _fake_decode_peak(vae: dict, latents: tuple[int, int, int]) -> int:
    from diffusers import AutoencoderKLWan

    from pipedit.adapter import frames_from_vae
    from pipedit.dryrun.fakeworld import fake_tensors
    from pipedit.dryrun.memory import StorageCounter
    from pipedit.dryrun.models import build_fake

    stats = {"latents_mean": [0.0] * vae["z_dim"], "latents_std": [1.0] * vae["z_dim"]}
    with fake_tensors():
        module = build_fake(AutoencoderKLWan, {**vae, **stats}, torch.bfloat16)
        z = torch.empty(1, vae["z_dim"], *latents, dtype=torch.bfloat16)
        with StorageCounter() as counter:
            frames_from_vae(module.decode(z, return_dict=False)[0])
    return counter.peak


@pytest.mark.parametrize("vae, latents", [(wan.VAE_21, (5, 60, 104)), (wan.VAE_22, (5, 44, 80))])
def test_the_vae_decode_bound_holds_for_diffusers_decode_on_fake_tensors(vae, latents):
    """diffusers' decode of the released VAE configs (832x480x17 for Wan2.1, 1280x704x17 for
    Wan2.2), every storage counted: the prediction bounds it from above by at most 10% (the
    factors in the wan vae_cost were set from such counts; this keeps them bounds)."""
    from pipedit.integrations.wan.vae_cost import decode_peak_bytes

    measured = _fake_decode_peak(vae, latents)
    predicted = decode_peak_bytes(vae, *latents)
    assert measured <= predicted <= 1.10 * measured


def test_a_wan_checkpoints_configs_give_the_released_spec(tmp_path):
    """from_checkpoint on the released A14B configs (no weights: counts from the dims): the
    second expert from model_index.json's transformer_2, the same dims as the built-in spec."""
    from pipedit.integrations.wan.released import write_release as write_wan_release
    from pipedit.planner.models import family_of, from_checkpoint

    root = write_wan_release("wan-a14b", tmp_path / "a14b")
    assert family_of(root) == "wan"
    spec, released = from_checkpoint(root, "wan"), full_size("wan-a14b")
    fields = ("heads", "head_dim", "layers", "mlp_ratio", "experts", "dit_params", "latent_channels", "vae_params",
              "text_params", "cfg_batch", "text_tokens")
    assert [getattr(spec, f) for f in fields] == [getattr(released, f) for f in fields]


def _a14b_offload(decode: int, ulysses: int, idle: str = "offload"):
    from pipedit.planner.search import Candidate

    return Candidate(decode, ulysses, (8 - decode) // ulysses, None, False, False, idle_expert=idle)


def test_a_swap_is_one_host_to_device_copy():
    """Offload re-points the idle expert at its mapped files (nothing copied out); bringing the
    other back is one copy, at the slower of the node's host rate and the pageable-copy rate."""
    from pipedit.planner.search import SWAP_COPY_RATE, SWAPS_PER_REQUEST, swap_seconds

    model = full_size("wan-a14b")
    expert = model.dit_params * model.dit_bytes_per_param
    eight = Problem(model, node("h100", 8, "nvlink"), SHAPE_720P, 40, 2)
    # 8 ranks share the node's 48 GB/s: 6 GB/s each, below the pageable rate.
    assert swap_seconds(eight, _a14b_offload(0, 1)) == pytest.approx(SWAPS_PER_REQUEST * expert / 6e9)
    one = Problem(model, node("h100", 1, "nvlink"), SHAPE_720P, 40, 2)
    alone = replace(_a14b_offload(0, 1), ring=1)  # one denoise rank: the pageable rate binds
    assert swap_seconds(one, alone) == pytest.approx(SWAPS_PER_REQUEST * expert / SWAP_COPY_RATE)
    assert swap_seconds(one, alone) == pytest.approx(2 * 4.45 * expert / (26.6 * 1024 ** 3))
    assert swap_seconds(eight, _a14b_offload(0, 1, "resident")) == 0.0


def test_host_memory_holds_the_idle_expert_once_per_node():
    from pipedit.planner.memory import RANK_HOST_BYTES
    from pipedit.planner.search import host_bytes

    model = full_size("wan-a14b")
    expert = model.dit_params * model.dit_bytes_per_param
    problem = Problem(model, node("h100", 8, "nvlink"), SHAPE_720P, 40, 2)
    for decode, ulysses in ((0, 1), (1, 7), (2, 2)):
        offload = host_bytes(problem, _a14b_offload(decode, ulysses))
        resident = host_bytes(problem, _a14b_offload(decode, ulysses, "resident"))
        assert resident == pytest.approx(8 * RANK_HOST_BYTES)  # every rank, decode ranks too
        assert offload - resident == pytest.approx(expert)  # one mapped copy, whatever the rank count


def test_plan_prints_the_host_column_for_an_offloaded_expert(capsys):
    assert main(["plan", "--model", "wan-a14b", "--idle-expert", "offload", "--gpus", "8", "--height", "720",
                 "--width", "1280", "--frames", "81", "--steps", "40", "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("rank decode"))
    columns = header.split()
    assert columns[columns.index("peak") + 2:columns.index("peak") + 4] == ["host", "GiB"]
    rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
    host = [float(row[9]) for row in rows]
    model = full_size("wan-a14b")
    assert host and all(h == pytest.approx((model.dit_params * 2 + 8 * 0.5 * 1024 ** 3) / 1024 ** 3, abs=0.05)
                        for h in host)
    assert any(line.startswith("host GiB: the node's host memory while serving") and "once per node" in line
               for line in lines)


def test_cpu_ranks_count_their_whole_memory_as_host_memory():
    """On CPU ranks the device is the host, and the experts never move (experts.py): one rank's
    host memory is its resident peak, offload or not."""
    from pipedit.planner.hardware import GpuProfile, make_node
    from pipedit.planner.search import host_bytes, peak_bytes

    cpu = GpuProfile("two cores", 1e11, 1e10, 24 * 1024 ** 3, 1.0, 1.0, 1.0, host_cores=2)
    problem = Problem(full_size("wan-a14b"), make_node(cpu, 1, "pcie"), Shape(480, 832, 17), 2, 1)
    alone = replace(_a14b_offload(0, 1, "resident"), ring=1)
    assert host_bytes(problem, alone) == peak_bytes(problem, alone)
    assert host_bytes(problem, replace(alone, idle_expert="offload")) == peak_bytes(problem, alone)
