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
start). At most `max_gpu_loras` named adapters keep their weights on the device; the least
recently used go back to host memory and return when a request names them (on a CPU device
nothing moves; the bookkeeping is the same)."""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..errors import InvalidRequestError
from .inject import named_adapter, run_adapter
from .spec import choose_loras

TRANSFORMERS = ("transformer", "transformer_2")  # the components adapters go into


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
        for name, _ in self.offered:  # injected on the device: keep the first max_on_device there
            if len(self.on_device) < self.max_on_device:
                self.on_device[name] = None
            else:
                self._move(name, torch.device("cpu"))
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
            self._move(victim, torch.device("cpu"))
        self._move(name, self.device)
        self.on_device[name] = None

    def _move(self, name: str, device: torch.device) -> None:
        if self.device.type == "cpu":
            return  # host memory is the device's
        from peft.tuners.tuners_utils import BaseTunerLayer

        adapter = named_adapter(name)
        for model in self.models.values():
            for module in model.modules():
                if not isinstance(module, BaseTunerLayer):
                    continue
                for layers in module.adapter_layer_names:
                    container = getattr(module, layers, None)
                    if isinstance(container, torch.nn.ModuleDict) and adapter in container:
                        container[adapter].to(device)
