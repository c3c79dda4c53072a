"""Named adapters' device placement (pipedit.lora.host_copies, RankLoras): the start holds at most
model.max_gpu_loras adapters on the compute device, an eviction points an adapter back at its one
host copy (no new host tensor), a switch waits for the device once, and the sequential baseline's
decode (DenoiseWorker._decode_offloaded) moves only what is on the device. The compute device is
`meta`: a CPU test sees where each tensor lives and what is allocated, not the copies' speed or
the pinned memory (a GPU's: tests/gpu/test_lora_moves_gpu.py)."""

import pytest
import torch

from pipedit.config import ModelConfig
from pipedit.request import VideoRequest

META = torch.device("meta")


def _request(*names):
    return VideoRequest("a kite", height=48, width=80, num_frames=9, steps=2, loras=[{"name": n} for n in names])


@pytest.fixture
def switch(wan_three_heads, wan_three_heads_adapters):
    from pipedit.adapter import load_adapter
    from pipedit.lora.inject import apply_loras
    from pipedit.lora.spec import named_loras
    from pipedit.lora.switch import RankLoras

    first, second = (str(path) for path in wan_three_heads_adapters)
    model = ModelConfig(offered_loras={"a": first, "b": second, "c": first}, max_gpu_loras=2)
    loaded = apply_loras(load_adapter(wan_three_heads, parts={"dit"}), named=named_loras(model.offered_loras))
    return RankLoras(loaded.components, model, META)


def _on_device(switch) -> set[str]:
    """The adapters with any weight on the compute device."""
    return {name for name, pairs in switch.host.copies.items() if any(t.is_meta for t, _ in pairs)}


def test_the_start_brings_only_what_the_lru_keeps(switch):
    assert _on_device(switch) == {"a", "b"} == set(switch.on_device)  # c waits in host memory
    for name, pairs in switch.host.copies.items():
        assert pairs and all(host.device.type == "cpu" and not host.is_pinned() for _, host in pairs), name


def test_switches_keep_at_most_max_gpu_loras_on_the_device(switch):
    for names in (("c",), ("b", "a"), ("c", "a"), ("b",)):
        switch.activate(_request(*names))
        assert _on_device(switch) == set(switch.on_device) and len(switch.on_device) <= 2, names
        assert set(names) <= _on_device(switch)


def test_an_eviction_reuses_the_host_copy(switch):
    def pointers(name):
        return [t.data_ptr() for t, _ in switch.host.copies[name]]

    hosts = [host.data_ptr() for _, host in switch.host.copies["a"]]
    switch.activate(_request("c", "b"))  # a leaves
    assert pointers("a") == hosts
    switch.activate(_request("a", "b"))  # a back (c leaves), then out again
    assert all(t.is_meta for t, _ in switch.host.copies["a"])
    switch.activate(_request("c", "b"))
    assert pointers("a") == hosts and [h.data_ptr() for _, h in switch.host.copies["a"]] == hosts


def test_a_switch_waits_for_the_device_once(switch, monkeypatch):
    from pipedit.lora import host_copies

    waits = []
    monkeypatch.setattr(host_copies, "wait_for_device", waits.append)
    switch.activate(_request("c", "a"))  # brings c (evicting b): two layers' worth of copies, one wait
    assert waits == [META]
    switch.activate(_request("a"))  # a is on the device: nothing queued, nothing to wait for
    switch.activate(_request("a"))  # the same set: no switch
    assert waits == [META]
    switch.activate(_request("b"))
    assert waits == [META, META]


def test_the_offloaded_decode_moves_only_what_is_on_the_device(switch, monkeypatch):
    """The sequential baseline's decode moves the DiT out and back; adapters the LRU evicted stay
    on the host, pointing at their host copy."""
    from pipedit.runtime.worker import DenoiseWorker

    dit = next(iter(switch.models.values()))
    moved, original = [], torch.Tensor.to

    def to(self, *args, **kwargs):  # meta tensors hold no data: leaving the device they become zeros
        target = torch.device(args[0]) if args and isinstance(args[0], (str, torch.device)) else None
        moved.append(self.data_ptr())  # meta tensors: 0; host tensors: where their data is
        if self.is_meta and target is not None and target.type == "cpu":
            return torch.zeros(self.shape, dtype=self.dtype)
        return original(self, *args, **kwargs)

    class Adapter:
        experts = [dit]
        components = {"vae": torch.nn.Linear(1, 1)}

        def decode(self, latents):
            assert not any(t.is_meta for t in (*dit.parameters(), *dit.buffers()))  # all on the host now
            return latents

    dit.to(META)  # the base weights on the device too; c is evicted (host)
    switch.host.evict("c")
    evicted = {host.data_ptr() for _, host in switch.host.copies["c"]}
    resident = [t for t in (*dit.parameters(), *dit.buffers()) if t.is_meta]
    worker = DenoiseWorker.__new__(DenoiseWorker)
    worker.device, worker.adapter = META, Adapter()
    monkeypatch.setattr(torch.Tensor, "to", to)
    worker._decode_offloaded(torch.ones(1))
    monkeypatch.undo()
    assert moved and not evicted & set(moved)  # c's host copies never moved: not out, not back
    assert all(t.is_meta for t in resident)  # the resident ones are back on the device
    assert not any(t.is_meta for t, _ in switch.host.copies["c"])
