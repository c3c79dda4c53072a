"""Named adapters' weights in host memory, and their moves to and from the compute device.

Each named adapter (model.offered_loras) has one host copy, made when it is injected (parked:
pipedit.lora.inject moves it off the device at once, so that loading ten adapters never holds
more than one of them on the device) and kept for the run: in pinned (page-locked) memory where
CUDA is available, so that a switch's host-to-device copies are asynchronous DMA instead of one
synchronous staged copy per tensor. Bringing an adapter to the device queues one non-blocking
copy per tensor; evicting it points its tensors back at the same host copy (the weights never
change on the device: nothing to copy back, nothing allocated). A switch waits for the device
once, at its end (`wait`), so the switch's time includes the copies the device ran.

Hazard: a non-blocking copy from pinned memory only reads the host tensor when the device runs
it; the host copies are never written after parking, so no copy can see a half-written one.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def adapter_tensors(model: torch.nn.Module, adapter: str) -> list[torch.Tensor]:
    """Every parameter and buffer of peft adapter `adapter` in `model` (its layers' lora_A,
    lora_B, ... entries), in module order."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    found = []
    for module in model.modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        for layers in module.adapter_layer_names:
            container = getattr(module, layers, None)
            if isinstance(container, torch.nn.ModuleDict) and adapter in container:
                found += [*container[adapter].parameters(), *container[adapter].buffers()]
            elif isinstance(container, torch.nn.ParameterDict) and adapter in container:
                found.append(container[adapter])
    return found


def pinned(device: torch.device) -> bool:
    """Host copies are page-locked only for a CUDA device (pinning needs the CUDA driver)."""
    return device.type == "cuda" and torch.cuda.is_available()


def park(model: torch.nn.Module, adapter: str) -> None:
    """Moves `adapter`'s tensors to host memory (pinned where CUDA is available): right after its
    injection, before the next adapter is injected."""
    for tensor in adapter_tensors(model, adapter):
        if tensor.device.type != "cpu":
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pinned(tensor.device))
            host.copy_(tensor.data)  # synchronous: the device copy is freed right after
            rebind(tensor, host)


class HostCopies:
    """The host copy of each named adapter's tensors, and their moves to `device` (not the CPU)."""

    def __init__(self, models: Iterable[torch.nn.Module], adapters: dict[str, str], device: torch.device):
        """`adapters`: name -> peft adapter name; their tensors are in host memory (parked)."""
        self.device = device
        self.copies: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for name, adapter in adapters.items():
            pairs = []
            for model in models:
                for tensor in adapter_tensors(model, adapter):
                    host = tensor.data if tensor.device.type == "cpu" else tensor.data.to("cpu")
                    if pinned(device) and not host.is_pinned():
                        host = host.pin_memory()
                    rebind(tensor, host)
                    pairs.append((tensor, host))
            self.copies[name] = pairs
        self.queued = False  # copies issued since the last wait

    def bring(self, name: str) -> None:
        """Queues the copies of `name`'s tensors to the device (non-blocking from pinned memory)."""
        for tensor, host in self.copies[name]:
            rebind(tensor, host.to(self.device, non_blocking=True))
        self.queued = True

    def evict(self, name: str) -> None:
        """`name`'s tensors point at their host copy again: no copy, no allocation; the device
        copies are freed (the caching allocator orders their reuse after the queued work)."""
        for tensor, host in self.copies[name]:
            rebind(tensor, host)

    def wait(self) -> None:
        """Once per switch, at its end: the device has run every queued copy."""
        if self.queued:
            wait_for_device(self.device)
            self.queued = False


def rebind(tensor: torch.Tensor, data: torch.Tensor) -> None:
    """`tensor` (a parameter or buffer, the same Python object afterwards, as the module holds it)
    now holds `data`'s storage (the `data` object itself, a host copy, stays as it was). As
    module.to does: `.data =` between CPU and CUDA tensors; between kinds it cannot join (the meta
    device the CPU tests stand a device with) torch.utils.swap_tensors with a new alias of `data`."""
    if torch._has_compatible_shallow_copy_type(tensor, data):
        tensor.data = data
        return
    alias = torch.nn.Parameter(data, requires_grad=False) if isinstance(tensor, torch.nn.Parameter) else data.detach()
    torch.utils.swap_tensors(tensor, alias)


def wait_for_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
