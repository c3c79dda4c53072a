"""Wan2.2 A14B's offloaded idle expert in its files' bytes: a float32 checkpoint under bf16 modules
maps (and copies at every swap) twice the module's bytes, which the dry run's host_bytes and the
planner count; loading reads the idle expert's files ahead; the first request's steps, which hold
the first swap, get a deadline widened by the files' read time. On the tiny A14B demo (files in
float32). The swap's own duration is a GPU's (tests/gpu/test_expert_offload_gpu.py)."""

import json
import os

import pytest
import torch

from pipedit.cli import main
from pipedit.mapped_weights import checkpoint_bytes
from recording_executor import RecordingExecutor


@pytest.fixture(scope="module")
def tiny_a14b(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    dims = WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=13)
    return write_demo_checkpoint(tmp_path_factory.mktemp("a14b") / "tiny", dims, preset="a14b")


def _module_bytes(folder, dtype):
    from diffusers import WanTransformer3DModel

    module = WanTransformer3DModel.from_pretrained(folder, torch_dtype=dtype)
    return sum(t.nbytes for t in module.state_dict().values())


def test_the_files_are_float32_and_twice_the_bf16_expert(tiny_a14b):
    files = checkpoint_bytes(tiny_a14b / "transformer_2")
    assert files == _module_bytes(tiny_a14b / "transformer_2", torch.float32)
    assert files > 1.5 * _module_bytes(tiny_a14b / "transformer_2", torch.bfloat16)  # some tensors stay float32 (norms)
    assert checkpoint_bytes(tiny_a14b / "absent") is None


def test_the_dry_runs_host_bytes_are_the_idle_experts_file_bytes(tiny_a14b, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\n  idle_expert: offload\n"
                      "generation:\n  height: 32\n  width: 48\n  num_frames: 5\n")
    assert main(["dry-run", "--config", str(config), "--model-path", str(tiny_a14b), "--steps", "2", "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    assert rank["host_bytes"] == checkpoint_bytes(tiny_a14b / "transformer_2")  # not the bf16 module's half


def test_the_planner_counts_file_bytes_for_host_memory_and_swaps(tiny_a14b):
    from dataclasses import replace

    from pipedit.planner.memory import idle_expert_host_bytes
    from pipedit.planner.models import from_checkpoint

    spec = from_checkpoint(tiny_a14b, "wan")
    files = checkpoint_bytes(tiny_a14b / "transformer_2")
    assert spec.experts == 2 and spec.dit_bytes_per_param == 2
    assert idle_expert_host_bytes(spec, "offload") == files > 1.5 * spec.dit_params * 2
    assert idle_expert_host_bytes(spec, "resident") == 0.0
    unknown = replace(spec, expert_file_bytes=0.0)  # released configs: no files, the serving dtype
    assert idle_expert_host_bytes(unknown, "offload") == spec.dit_params * 2


def test_loading_reads_the_idle_experts_files_ahead(tiny_a14b, monkeypatch):
    """Offload's load (experts.offload_homes, what the adapter calls on a GPU rank) advises the
    kernel to read transformer_2's files now (posix_fadvise WILLNEED over the whole file)."""
    from pipedit.components import load_component
    from pipedit.adapter import read_model_index
    from pipedit.integrations.wan.experts import offload_homes
    from pipedit.mapped_weights import checkpoint_files

    if not hasattr(os, "posix_fadvise"):
        pytest.skip("this platform has no posix_fadvise (nothing is read ahead there)")
    advised = []
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, offset, length, advice: advised.append((os.fstat(fd).st_ino, offset, length, advice)))
    index = read_model_index(tiny_a14b)
    components = {"transformer": load_component(tiny_a14b, index, "transformer", dtype=torch.bfloat16, device="cpu")}
    homes = offload_homes(tiny_a14b, index, components, torch.bfloat16)
    assert homes[1] is not None and "transformer_2" in components
    idle_files = {path.stat().st_ino for path in checkpoint_files(tiny_a14b / "transformer_2")}
    assert {inode for inode, *_ in advised} == idle_files
    assert all(call[1:] == (0, 0, os.POSIX_FADV_WILLNEED) for call in advised)


def test_the_first_requests_steps_get_the_first_swaps_deadline():
    from pipedit.config import ReliabilityConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime.deadlines import FIRST_SWAP_READ_BYTES_PER_S
    from pipedit.runtime.layout import WorldLayout
    from pipedit.runtime.request_pipeline import RequestPipeline

    reliability = ReliabilityConfig(op_deadline_floor_s=5.0, group_timeout_s=300.0)
    swap_bytes = int(20 * FIRST_SWAP_READ_BYTES_PER_S)  # 20 s to read at the stated rate
    executor = RecordingExecutor(swap_bytes)
    pipeline = RequestPipeline(executor, WorldLayout(decode=0), aco="off", reliability=reliability)
    request = VideoRequest("a fox", height=64, width=64, num_frames=5, steps=2)
    assert len(list(pipeline.run([request, request]))) == 2
    steps = [timeout for method, _, timeout in executor.calls if method == "step"]
    assert steps == [5.0 + 20.0 + 5.0 + 20.0] * 2 + [5.0 + 5.0] * 2  # op_s + grace, each widened by 20 s
    sent = [args[0] for method, args, _ in executor.calls if method == "set_op_deadline"]
    assert sent == [25.0, 5.0]  # the ranks' deadline, around the first request only
    assert [method for method, *_ in executor.calls].count("first_swap_bytes") == 1


def test_nothing_offloaded_keeps_the_step_deadline():
    from pipedit.config import ReliabilityConfig
    from pipedit.request import VideoRequest
    from pipedit.runtime.layout import WorldLayout
    from pipedit.runtime.request_pipeline import RequestPipeline

    executor = RecordingExecutor(0)
    pipeline = RequestPipeline(executor, WorldLayout(decode=0), aco="off",
                               reliability=ReliabilityConfig(op_deadline_floor_s=5.0))
    list(pipeline.run([VideoRequest("a fox", height=64, width=64, num_frames=5, steps=2)]))
    assert [timeout for method, _, timeout in executor.calls if method == "step"] == [10.0, 10.0]
