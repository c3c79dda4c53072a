"""Named adapters under --compile: a fixed set of adapter slots whose weights change in place.

Switching by set_adapters (pipedit.lora.switch) changes which peft adapters a layer runs, and
the compiled blocks guard on that: every new set of active adapters recompiles them, and past
dynamo's recompile limit (8 variants per block class) they silently run eagerly (measured on the
tiny Wan: the fourth distinct set hit it). Here every layer any named adapter touches holds
min(`model.max_gpu_loras`, adapters offered for its model) slot adapters, always active, of the
largest rank among the adapters; a request's activation writes its adapters' weights into the slots (zero-padded to that rank, each
B and bias already multiplied by its file's alpha/r and the request's scale, the slot's own
scaling being 1) and zeroes the slots it leaves unused. Nothing the graphs guard on changes, so
a switch never recompiles (tests/lora/test_lora_slots.py counts the graphs).

The cost, against the eager path: every slot runs on every step, used or not (their low-rank
matmuls at the largest rank over the union of the adapters' layers), and a switch copies the
chosen adapters' weights from host memory to the device. The named adapters themselves are read
once at start, as the eager path reads them (diffusers' loaders, any format they convert), then
kept in host memory only. Adapters of other layer kinds than linear layers, or with DoRA, are
refused here: the slots are linear LoRA pairs."""

from __future__ import annotations

import torch

from ..errors import UserInputError
from .inject import named_adapter, run_adapter
from .switch import TRANSFORMERS, resolve


def slot_adapter(index: int) -> str:
    return f"slot{index}"


class SlotLoras:
    """Same use as RankLoras (`activate(request)` before the request's first step on every denoise
    rank; `switches`, `current`); built before the blocks are compiled."""

    def __init__(self, components: dict, model_config, device: torch.device):
        self.models = {t: components[t] for t in TRANSFORMERS
                       if t in components and getattr(components[t], "_hf_peft_config_loaded", False)}
        self.config = model_config
        # target -> its slot count: a request holds at most max_gpu_loras adapters, and at most
        # as many as the target is offered (a slot no adapter can fill would run zeros every step).
        self.slots: dict[str, int] = {}
        self.run = {t: ([] if model_config.fuse_loras else
                        [(run_adapter(i), spec.scale) for i, spec in enumerate(model_config.run_loras)
                         if t in spec.targets and run_adapter(i) in self.models[t].peft_config])
                    for t in self.models}
        # target -> adapter name -> layer name -> (A, B x alpha/r, bias x alpha/r or None), on the host
        self.weights: dict[str, dict[str, dict[str, tuple]]] = {}
        self.layers: dict[str, dict[str, torch.nn.Module]] = {}  # target -> layer name -> peft layer
        for target, model in self.models.items():
            names = [name for name, spec in model_config.offered_loras if target in spec.targets]
            self.weights[target] = {name: _read(model, named_adapter(name)) for name in names}
            self.slots[target] = min(model_config.max_gpu_loras, len(names))
            self.layers[target] = _add_slots(model, self.weights[target], self.slots[target])
            if names:
                model.delete_adapters([named_adapter(name) for name in names])
            slots = [(slot_adapter(i), 1.0) for i in range(self.slots[target])] if self.layers[target] else []
            active = self.run[target] + slots
            if active:
                model.set_adapters([n for n, _ in active], [s for _, s in active])
            else:
                model.disable_lora()
        self.in_slot: dict[str, list] = {t: [None] * self.slots[t] for t in self.models}  # (name, scale) per slot
        self.current: tuple | None = ()
        self.switches = 0

    def activate(self, request) -> None:
        chosen = resolve(self.config, request)
        if chosen == self.current:
            return
        for target in self.models:
            wanted = [(n, s) for n, s in chosen if n in self.weights[target]]
            for index, entry in enumerate(self._assign(target, wanted)):
                if entry != self.in_slot[target][index]:
                    self._write(target, index, entry)
        self.current = chosen
        self.switches += 1

    def _assign(self, target: str, wanted: list) -> list:
        """Slot contents for `wanted`: an adapter already in a slot at the same scale stays there."""
        slots = list(self.in_slot[target])
        kept = [entry for entry in slots if entry in wanted]
        slots = [entry if entry in kept else None for entry in slots]
        for entry in wanted:
            if entry not in kept:
                slots[slots.index(None)] = entry
        return slots

    @torch.no_grad()
    def _write(self, target: str, index: int, entry) -> None:
        adapter = slot_adapter(index)
        weights = self.weights[target][entry[0]] if entry is not None else {}
        for layer_name, layer in self.layers[target].items():
            a, b = layer.lora_A[adapter].weight, layer.lora_B[adapter]
            given = weights.get(layer_name)
            if given is None:
                b.weight.zero_()
                if b.bias is not None:
                    b.bias.zero_()
                continue
            down, up, bias = given
            rank = down.shape[0]
            a[:rank].copy_(down)
            a[rank:].zero_()
            b.weight[:, :rank].copy_(up)
            b.weight[:, rank:].zero_()
            b.weight.mul_(entry[1])
            if b.bias is not None and bias is None:
                b.bias.zero_()
            elif b.bias is not None:
                b.bias.copy_(bias)
                b.bias.mul_(entry[1])
        self.in_slot[target][index] = entry


def _read(model: torch.nn.Module, adapter: str) -> dict[str, tuple]:
    """The adapter's layers: name -> (A, B x alpha/r, bias x alpha/r or None), copied to the host."""
    from peft.tuners.lora import LoraLayer

    found = {}
    for name, layer in model.named_modules():
        if not isinstance(layer, LoraLayer) or adapter not in layer.lora_A:
            continue
        if not isinstance(layer.lora_A[adapter], torch.nn.Linear) or getattr(layer, "use_dora", {}).get(adapter):
            raise UserInputError(f"--compile with model.offered_loras: the adapter's layer {name} is not a plain "
                                 f"linear LoRA pair (the compiled slots take only those); run this adapter without "
                                 f"--compile")
        scale = layer.scaling[adapter]
        up = layer.lora_B[adapter]
        found[name] = (layer.lora_A[adapter].weight.detach().to("cpu", copy=True),
                       (up.weight.detach() * scale).to("cpu"),
                       None if up.bias is None else (up.bias.detach() * scale).to("cpu"))
    return found


def _add_slots(model: torch.nn.Module, weights: dict[str, dict[str, tuple]], count: int) -> dict:
    """`count` slot adapters over every layer any adapter touches, of the largest rank, with a
    bias where any adapter has one; all zero (no effect) until a request writes them."""
    from peft import LoraConfig

    layers = sorted({layer for adapter in weights.values() for layer in adapter})
    if not layers:
        return {}
    rank = max(down.shape[0] for adapter in weights.values() for down, _, _ in adapter.values())
    bias = any(b is not None for adapter in weights.values() for _, _, b in adapter.values())
    for index in range(count):
        config = LoraConfig(r=rank, lora_alpha=rank, target_modules=layers, lora_bias=bias, init_lora_weights=False)
        model.add_adapter(config, adapter_name=slot_adapter(index))
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name in layers:
            for index in range(count):
                up = modules[name].lora_B[slot_adapter(index)]
                up.weight.zero_()
                if up.bias is not None:
                    up.bias.zero_()
    return {name: modules[name] for name in layers}
