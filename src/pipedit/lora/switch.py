"""Which adapters a denoise rank's DiT runs with, request by request.

The run's unfused adapters (model.run_loras) are always active; a request adds the server's named
adapters it chooses (VideoRequest.loras, from model.offered_loras) with its scales. Every denoise rank
(SP, ring, CFG groups) activates the set the request carries in `begin`, before the request's
first step: each rank takes it from the same request, so they switch in lockstep and none
decides alone. Aco helpers compute attention from the q/k/v they are sent and hold no adapter;
decode ranks never run the DiT, so a decode overlapping the next request's denoising is not
affected by a switch (DeDiVAE keeps pipelining). A step cache's state belongs to one request
(pipedit.cache.session: a new state per request), so cached residuals never cross a switch.

Memory: every named adapter is read and injected at start (a file that does not fit fails the
start) and parked in host memory at once (pipedit.lora.host_copies: pinned where CUDA is
available), so the start holds at most one on the device at a time. At most `max_gpu_loras`
named adapters keep their weights on the device: the first ones are brought at start, the least
recently used go back to their host copy and return when a request names them (on a CPU device
nothing moves; the bookkeeping is the same). A switch queues its copies and waits for the device
once at its end, so `lora_switch_s` (the worker's) is what the device did."""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..errors import InvalidRequestError
from .host_copies import HostCopies
from .inject import TRANSFORMERS, named_adapter, run_adapter
from .spec import choose_loras


def resolve(model_config, request) -> tuple[tuple[str, float], ...]:
    """The request's adapters with their scales (a name's default where it gives none);
    InvalidRequestError naming the offered adapters for a name the server lacks, or when one
    request names more than fit on the device."""
    return choose_loras(request.loras, model_config.offered_loras, model_config.max_gpu_loras,
                        error=InvalidRequestError)


class RankLoras:
    def __init__(self, components: dict, model_config, device: torch.device):
        self.models = {t: components[t] for t in TRANSFORMERS
                       if t in components and getattr(components[t], "_hf_peft_config_loaded", False)}
        self.config = model_config
        self.offered = model_config.offered_loras
        self.targets = {name: spec.targets for name, spec in self.offered}
        self.run: dict[str, list[tuple[str, float]]] = {t: [] for t in self.models}
        if not model_config.fuse_loras:
            for index, spec in enumerate(model_config.run_loras):
                for target in spec.targets:  # a file of full deltas only left no adapter: its deltas are in the weights
                    if target in self.models and run_adapter(index) in self.models[target].peft_config:
                        self.run[target].append((run_adapter(index), spec.scale))
        self.device = torch.device(device)
        self.max_on_device = model_config.max_gpu_loras
        self.on_device: OrderedDict[str, None] = OrderedDict()  # least recently used first
        moves = self.device.type != "cpu" and self.models  # on a CPU device the host is the device
        self.host = HostCopies(self.models.values(), {name: named_adapter(name) for name, _ in self.offered},
                               self.device) if moves else None
        for name, _ in self.offered[:self.max_on_device]:  # the LRU starts with the first ones
            self.on_device[name] = None
            if self.host is not None:
                self.host.bring(name)
        if self.host is not None:
            self.host.wait()
        self.current: tuple | None = None
        self.switches = 0  # activations that changed the set (tests and timings read it)
        if self.models:
            self._set(())

    def activate(self, request) -> None:
        """Before the request's first step, on every denoise rank."""
        chosen = resolve(self.config, request)
        if chosen == self.current:
            return
        for name, _ in chosen:
            self._make_resident(name, keep={n for n, _ in chosen})
        if self.host is not None:
            self.host.wait()  # once per switch: its copies ran (the switch's time is the device's)
        self._set(chosen)
        self.switches += 1

    def _set(self, chosen) -> None:
        for target, model in self.models.items():
            active = self.run[target] + [(named_adapter(n), s) for n, s in chosen if target in self.targets[n]]
            if active:
                model.enable_lora()
                model.set_adapters([n for n, _ in active], [s for _, s in active])
            else:
                model.disable_lora()
        self.current = chosen

    def _make_resident(self, name: str, keep: set[str]) -> None:
        if name in self.on_device:
            self.on_device.move_to_end(name)
            return
        while len(self.on_device) >= self.max_on_device:
            victim = next(n for n in self.on_device if n not in keep)
            del self.on_device[victim]
            if self.host is not None:
                self.host.evict(victim)
        if self.host is not None:
            self.host.bring(name)
        self.on_device[name] = None
