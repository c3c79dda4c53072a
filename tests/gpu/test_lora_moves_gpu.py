"""Named LoRA adapters on one GPU: parked in pinned host memory as they are injected, only what
the LRU keeps on the device, switches that copy asynchronously and wait once.

What it measures, and why a CPU cannot: on a CPU device nothing moves (the host is the device)
and pinned memory needs the CUDA driver; the CPU tests stand the device with `meta`. Here the
device memory at start holds max_gpu_loras adapters (not all of them), the injection's peak
never holds them all, the host copies are pinned and stay the same tensors over evictions, and a
switch's time (lora_switch_s' measure: up to its one wait) is printed."""

import time

import pytest
import torch

from pipedit.config import ModelConfig
from pipedit.request import VideoRequest

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _request(*names):
    return VideoRequest("a kite", height=48, width=80, num_frames=9, steps=2, loras=[{"name": n} for n in names])


def _allocated_for(tensors) -> int:
    """What CUDA's caching allocator counts for `tensors`: each one's bytes rounded up to its 512-byte
    blocks (the tiny test adapters' tensors are smaller than one block)."""
    return sum(-(-t.nbytes // 512) * 512 for t in tensors)


def test_only_what_the_lru_keeps_is_on_the_device(wan_three_heads, wan_three_heads_adapters):
    from pipedit.adapter import load_adapter
    from pipedit.lora.host_copies import adapter_tensors
    from pipedit.lora.inject import apply_loras, named_adapter
    from pipedit.lora.spec import named_loras
    from pipedit.lora.switch import RankLoras

    first, second = (str(path) for path in wan_three_heads_adapters)
    offered = {"a": first, "b": second, "c": first, "d": second}
    model = ModelConfig(offered_loras=offered, max_gpu_loras=1)
    loaded = load_adapter(wan_three_heads, parts={"dit"}, device="cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    apply_loras(loaded, named=named_loras(model.offered_loras))
    dit = loaded.components["transformer"]
    one = max(_allocated_for(adapter_tensors(dit, named_adapter(n))) for n in offered)
    assert torch.cuda.memory_allocated() - base < one  # every adapter parked on the host
    assert torch.cuda.max_memory_allocated() - base < 2 * one + 2 ** 20  # one injected at a time
    switch = RankLoras(loaded.components, model, torch.device("cuda"))
    assert all(host.is_pinned() for pairs in switch.host.copies.values() for _, host in pairs)
    assert torch.cuda.memory_allocated() - base <= one  # the LRU's one
    hosts = [host.data_ptr() for _, host in switch.host.copies["a"]]
    for names in (("b",), ("c",), ("a",), ("d",)):
        start = time.perf_counter()
        switch.activate(_request(*names))  # ends with its one wait for the device
        print(f"switch to {names}: {(time.perf_counter() - start) * 1e3:.2f} ms")
        assert torch.cuda.memory_allocated() - base <= one
    assert [t.data_ptr() for t, _ in switch.host.copies["a"]] == hosts  # evicted twice: the same host copy
