"""Reading a run's LoRA files and injecting them into the DiT on a denoise rank.

A file in diffusers' own form (`transformer.<layer>.lora_A/lora_B`) of a family with a diffusers
LoRA loader mixin is read by that mixin (`lora_state_dict`), exactly as `pipe.load_lora_weights`
reads it; every other form (the trainers' originals, musubi/kohya, full deltas, and any form of a
family without a mixin: HunyuanVideo 1.5) by pipedit's own conversion (pipedit.lora.forms) with
the family's key renames. Both end in the model's peft injection (`load_lora_adapter`: peft
layers around the targeted modules), weighted with `set_adapters`. Full deltas on layers without
a low-rank pair (diff / diff_b on norms, modulation, embeddings) are added to the weights of a run
adapter (times its scale); an adapter offered by name cannot switch them and is refused.
A path may be a hub id (pipedit.hub), fetched on the rank's node.

Hazard: the sequence-parallel shard plan hooks modules (`proj_out` gathers the sharded sequence)
and compile wraps the blocks; peft replaces a targeted module by a wrapper holding it as
`base_layer`, so a hook installed before would run inside the wrapper, before the adapter's delta
is added (a per-shard delta on a gathered output). Adapters therefore go in right after the model
loads (the rank calls apply_loras after pipedit.adapter.load_adapter), before any plan or compile.
The adapters' own attention processors may be in place already: peft wraps the linear layers the
processors call, not the attention modules that hold them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import UserInputError
from .host_copies import park
from .spec import LoraSpec

PREFIX = "transformer"  # the prefix diffusers' converted state dicts carry (load_lora_adapter's default)
_LORA_PARTS = (".lora_A.", ".lora_B.", ".lora_magnitude_vector")


def lora_families() -> tuple[str, ...]:
    from ..families import families

    return tuple(entry.name for entry in families() if entry.lora is not None or entry.lora_names is not None)


def lora_mixin(entry):
    """The family's diffusers LoRA loader mixin, None where diffusers has none (pipedit's own
    conversion reads its files); UserInputError naming the families that take LoRA adapters when
    this one takes none."""
    if entry.lora is None and entry.lora_names is None:
        raise UserInputError(f"LoRA adapters are not available for {entry.name}; the families that take them: "
                             f"{', '.join(lora_families())}")
    return entry.load(entry.lora) if entry.lora is not None else None


TRANSFORMERS = ("transformer", "transformer_2")  # the components pipedit applies adapters to


def loadable(mixin) -> tuple[str, ...]:
    """The transformers adapters go into: the mixin's (the other components a mixin loads into, as
    LTX-2's text connectors, run outside the denoise ranks' switch and are not applied), else the
    transformer alone."""
    return tuple(m for m in mixin._lora_loadable_modules if m in TRANSFORMERS) if mixin is not None \
        else ("transformer",)


def run_adapter(index: int) -> str:
    """The peft adapter name of the run's adapter `index` (model.run_loras)."""
    return f"lora{index}"


def named_adapter(name: str) -> str:
    """The peft adapter name of the server's adapter `name` (model.offered_loras)."""
    return f"named_{name}"


def apply_loras(adapter, specs: tuple[LoraSpec, ...] = (), fuse: bool = False,
                named: tuple[tuple[str, LoraSpec], ...] = ()):
    """On a rank, right after pipedit.adapter.load_adapter and before anything hooks or wraps the
    DiT (the module's hazard): injects the run's `specs` (model.run_loras) into the adapter's
    transformers, each weighted by its scale; `fuse`: merged into the weights and their peft layers
    removed (no per-step cost). Then the server's `named` adapters (model.offered_loras), loaded
    inactive and parked in host memory (pipedit.lora.switch activates a request's). A family without a LoRA loader is refused
    on every rank; a rank that did not load the DiT has nothing to inject. Returns `adapter`."""
    if not specs and not named:
        return adapter
    from ..families import family

    entry = family(adapter.family)
    reader = LoraReader(lora_mixin(entry), entry.load(entry.lora_names) if entry.lora_names else ())
    components = adapter.components
    if "transformer" not in components:
        return adapter
    adapter.check_loras()
    if specs:
        _apply_run_adapters(components, adapter.family, reader, specs, fuse)
    for name, spec in named:
        for target in _targets(spec, reader.mixin, components, adapter.family):
            deltas = load_adapter_into(components[target], reader, spec, named_adapter(name))
            if deltas:
                raise UserInputError(f"LoRA file {spec.path} changes {next(iter(deltas))} by a full delta (diff / "
                                     f"diff_b without a low-rank pair), which an adapter offered by name cannot switch "
                                     f"per request: give it as a run adapter (--lora, model.run_loras)")
            # To host memory at once: the device never holds more than this one while the others
            # load (pipedit.lora.switch brings back those the device keeps).
            park(components[target], named_adapter(name))
    return adapter


@dataclass(frozen=True)
class LoraReader:
    """How a family's files are read: its diffusers mixin (None: none) and its key renames."""

    mixin: Any
    renames: tuple = ()


def _targets(spec: LoraSpec, mixin, components: dict, family: str) -> tuple[str, ...]:
    takes = loadable(mixin)
    for target in spec.targets:
        if target not in takes:
            raise UserInputError(f"{spec.path}: {family} takes LoRA adapters into {', '.join(takes)}, "
                                 f"not {target} (experts {spec.experts!r})")
        if target not in components:
            raise UserInputError(f"{spec.path}: this {family} checkpoint has no {target} (experts "
                                 f"{spec.experts!r}); it has {', '.join(t for t in takes if t in components)}")
    return spec.targets


@torch.no_grad()
def add_deltas(model: torch.nn.Module, deltas: dict, scale: float) -> None:
    """A run adapter's full deltas, added to the weights as written (times its scale)."""
    params = dict(model.named_parameters())
    for name, delta in deltas.items():
        param = params[name]
        param.add_(delta.to(device=param.device, dtype=param.dtype) * scale)


def _apply_run_adapters(components: dict, family: str, reader, specs, fuse: bool) -> None:
    chosen: dict[str, list[tuple[str, float]]] = {}
    for index, spec in enumerate(specs):
        for target in _targets(spec, reader.mixin, components, family):
            name = run_adapter(index)
            deltas = load_adapter_into(components[target], reader, spec, name)
            add_deltas(components[target], deltas, spec.scale)
            if name in getattr(components[target], "peft_config", {}):  # a file of full deltas only has none
                chosen.setdefault(target, []).append((name, spec.scale))
    for target, adapters in chosen.items():
        model = components[target]
        names, scales = [n for n, _ in adapters], [s for _, s in adapters]
        model.set_adapters(names, scales)
        if fuse:
            model.fuse_lora(adapter_names=names)
            model.unload_lora()


def read_state_dict(mixin, spec: LoraSpec, model: torch.nn.Module) -> tuple[dict, dict | None]:
    """(state dict in diffusers' keys, diffusers' adapter metadata or None) of a file in
    diffusers' form, read by the family's mixin."""
    path = local_file(spec)
    try:
        state_dict, metadata = mixin.lora_state_dict(str(path), use_safetensors=True, local_files_only=True,
                                                     return_lora_metadata=True)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise UserInputError(f"LoRA file {path} could not be read as a LoRA ({type(error).__name__}: {error})") \
            from error
    expand = getattr(mixin, "_maybe_expand_t2v_lora_for_i2v", None)  # Wan: a T2V LoRA on an I2V model
    if expand is not None:
        state_dict = expand(transformer=model, state_dict=state_dict)
    return state_dict, metadata


def check_fits(state_dict: dict, model: torch.nn.Module, path: str) -> None:
    """UserInputError naming the first key that matches no layer of `model`."""
    if not state_dict:
        raise UserInputError(f"LoRA file {path} holds no weights")
    layers = dict(model.named_modules())
    for key in state_dict:
        layer = _layer_of(key)
        if layer is None or layer not in layers:
            raise UserInputError(f"LoRA file {path} does not fit this {type(model).__name__}: its key {key!r} "
                                 f"matches no layer")


def _layer_of(key: str) -> str | None:
    """`transformer.<layer>.lora_A.weight` -> `<layer>`; None for keys of anything else."""
    if not key.startswith(PREFIX + "."):
        return None
    rest = key[len(PREFIX) + 1:]
    for part in _LORA_PARTS:
        if part in rest:
            return rest.split(part)[0]
    return None


def local_file(spec: LoraSpec) -> Path:
    """The adapter's file on this node (a hub id fetched into the hub cache); UserInputError when
    it is missing or not a .safetensors file."""
    from ..hub import lora_file

    path = lora_file(spec.path)
    if not path.is_file():
        raise UserInputError(f"LoRA file {path} does not exist")
    if path.suffix != ".safetensors":
        raise UserInputError(f"LoRA file {path}: only .safetensors files are read (pickled weights can run code)")
    return path


def diffusers_form(keys) -> bool:
    """Every key in diffusers' own form: transformer.<layer>.lora_A/lora_B/magnitude."""
    return bool(keys) and all(_layer_of(key) is not None for key in keys)


def load_adapter_into(model: torch.nn.Module, reader: LoraReader, spec: LoraSpec, name: str) -> dict:
    """Injects the file's low-rank pairs as peft adapter `name`; returns its full deltas
    ({parameter: delta}, the caller adds them)."""
    from .forms import convert, read_file

    path = local_file(spec)
    tensors, settings = read_file(path)
    if reader.mixin is not None and diffusers_form(tensors):
        state_dict, metadata = read_state_dict(reader.mixin, spec, model)
        check_fits(state_dict, model, spec.path)
        deltas = {}
    else:
        converted = convert(tensors, settings, model, reader.renames, f"LoRA file {path}")
        state_dict, metadata, deltas = converted.peft_state_dict(PREFIX), None, converted.deltas
        if not state_dict and not deltas:
            raise UserInputError(f"LoRA file {path} holds no weights")
        if not state_dict:
            return deltas
    # Hazard: with low_cpu_mem_usage (pipe.load_lora_weights' default) diffusers creates the
    # adapter's tensors empty (meta) and fills them from the file, so one the file lacks (a LoRA
    # bias of a layer without `diff_b` while others have one: diffusers enables biases on every
    # layer then) fails at the first step. Created initialised instead, such a bias is zero: no
    # delta, what the file means. The check below guards the rest.
    with warnings.catch_warnings():  # peft warns at every adapter after the first: several are what we want
        warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute", category=UserWarning)
        model.load_lora_adapter(state_dict, prefix=PREFIX, adapter_name=name, metadata=metadata,
                                low_cpu_mem_usage=False)
    for param_name, param in model.named_parameters():
        if param.is_meta:
            raise UserInputError(f"LoRA file {spec.path} does not give {param_name} (diffusers made the layer "
                                 f"from the file's other keys): the file is incomplete for this model")
    return deltas
