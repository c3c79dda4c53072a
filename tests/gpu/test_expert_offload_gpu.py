"""Wan2.2 A14B's idle expert offloaded on one GPU, from float32 files under bf16 modules.

What it measures, and why a CPU cannot: a CPU device never offloads (the host is the device), so
the CPU tests stand the device with `meta` and see the host side only. Here the load reads the
idle expert's files ahead, the first swap copies the files' bytes (float32: twice the module's)
host to device and casts there, and the swapped-in expert computes in bf16 on the GPU; the
swap's seconds and rate are printed (the planner's SWAP_COPY_RATE is such a rate at 14B)."""

import os
import time

import pytest
import torch

from pipedit.adapter import load_adapter
from pipedit.mapped_weights import checkpoint_bytes, checkpoint_files

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def tiny_a14b(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("a14b") / "tiny",
                                 WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=13), preset="a14b")


def test_the_first_swap_copies_the_files_bytes_read_ahead_at_load(tiny_a14b, monkeypatch):
    advised, advise = [], os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, *rest: (advised.append(os.fstat(fd).st_ino), advise(fd, *rest)))
    adapter = load_adapter(tiny_a14b, parts={"dit"}, device="cuda", dtype=torch.bfloat16, idle_expert="offload")
    experts = adapter.expert_set
    assert experts.offload
    assert set(advised) == {path.stat().st_ino for path in checkpoint_files(tiny_a14b / "transformer_2")}
    files = checkpoint_bytes(tiny_a14b / "transformer_2")
    assert adapter.first_swap_bytes() == files == experts.file_bytes[1]
    low = adapter.experts[1]
    assert all(p.device.type == "cpu" for p in low.parameters())
    torch.cuda.synchronize()
    start = time.perf_counter()
    experts.for_timestep(torch.tensor(100.0))  # the first swap: the low-noise expert comes in
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    assert all(p.device.type == "cuda" for p in low.parameters())
    assert all(p.device.type == "cpu" for p in adapter.experts[0].parameters())  # the other left
    assert adapter.compute_dtype == torch.bfloat16 and low.dtype == torch.bfloat16
    print(f"first swap: {files} file bytes in {seconds * 1e3:.2f} ms ({files / seconds / 1e9:.2f} GB/s)")
