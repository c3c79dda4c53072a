"""The model families pipedit serves, one registry entry each, discovered from their packages.

An entry holds what the rest of pipedit needs to know about a family besides its model code: the
name users type (--model, config model.name, the adapter's `family`), the adapter class, the
diffusers pipelines it serves, how the planner and the dry run model it, its demo checkpoints, its
step-cache coefficients and what its refusals say it takes. Code is named by "module:attribute"
targets, imported on first use.

Discovery (on the first question asked of the registry): every package under pipedit.integrations
whose `family` module declares `FAMILY = Family(...)`, then every module named in the environment
variable PIPEDIT_FAMILIES (comma-separated, each declaring FAMILY): a family added from outside
pipedit, known in every process that inherits the environment (Ray's rank actors, spawned ranks).
A family module imports nothing but this registry: discovery imports no model code (nor torch).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ModelPathError

LOADING_OPTIONS = ("idle_expert", "text_encoder_path")


@dataclass(frozen=True)
class Planner:
    """The cost model's view of a family (pipedit.planner), each a "module:attribute" target."""

    full_size: str  # {release name: () -> ModelSpec}: the full-size models planned from released configs
    from_checkpoint: str  # (root: Path) -> ModelSpec with the widths of the checkpoint's configs
    vae_flops: str  # (model, height, width, frames, tiled) -> FLOPs of one decode
    vae_peak: str  # (model, Shape, tiled) -> decode activation peak in bytes on one rank
    decode_split: str  # how a decode splits over decode ranks (a planner.split_decode.Unsplit)
    published: str | None = None  # a planner.validation.Published: published runs `plan --validate-published` reads
    paper: str | None = None  # a planner.validation.PaperCells: its rows of the PipeDiT paper's headline table
    names_itself: bool = False  # the engine config `pipedit plan` writes names the model (model.name)


@dataclass(frozen=True)
class Demo:
    """The synthetic checkpoints `pipedit demo-checkpoint` writes and the engine falls back on."""

    ensure: str  # () -> Path: the demo model used when no model path is given (built once, cached)
    write: str  # (directory[, preset]) -> Path; FileExistsError when the folder holds a checkpoint
    presets: str | None = None  # () -> (default preset, {preset: one-line description}); None: no --preset
    about: str = ""  # what `demo-checkpoint --model NAME` writes (its --help)


@dataclass(frozen=True)
class DryRun:
    """How `pipedit dry-run` builds the family's ranks with fake tensors."""

    released: str  # (release name, folder) -> Path: the released configs written to folder, no weights
    fakes: tuple[tuple[str, str], ...] = ()  # (loader "module:attr", replacement "module:attr") while faked
    tiling: str | None = None  # module whose should_tile / free_device_bytes decide VAE tiling on free memory


@dataclass(frozen=True)
class Hub:
    """What a hub id of the family fetches (pipedit.hub): allow patterns in huggingface_hub's
    sense, relative to the repo's root."""

    files: tuple[str, ...]  # the checkpoint's files the family loads (configs, weights, tokenizers)
    text_encoder_files: tuple[str, ...] = ()  # a separate text encoder repo's (model.text_encoder_path)
    # (repo id, GB on disk of `files` there): the released checkpoints, for "Getting the weights"
    sizes: tuple[tuple[str, float], ...] = ()


def component_files(*components: str, whole: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Allow patterns of a diffusers-layout repo: model_index.json, each component's configs and
    safetensors weights (not the .bin / .pth copies some repos hold beside them), and the `whole`
    folders (tokenizers, schedulers: small files of many kinds)."""
    files = ["model_index.json"]
    for component in components:
        files += [f"{component}/*.json", f"{component}/*.safetensors"]
    return tuple(files + [f"{folder}/*" for folder in whole])


@dataclass(frozen=True)
class Family:
    name: str  # the one spelling: --model, model.name, the adapter's `family`, ModelSpec.family
    adapter: str  # "module:Class" of the ModelAdapter
    planner: Planner
    demo: Demo
    dry_run: DryRun
    pipelines: tuple[str, ...] = ()  # model_index.json _class_name values this family serves
    # Pipelines of the family's releases it does not serve, (_class_name, what that pipeline adds):
    # a checkpoint of one is refused naming what it adds and what the family serves.
    refuses: tuple[tuple[str, str], ...] = ()
    layout: str | None = None  # (path) -> bool: the folder holds the family's own release layout
    layout_about: str = ""  # that layout in words, for the error naming what a model path may hold
    options: frozenset[str] = frozenset()  # load_adapter options it takes (LOADING_OPTIONS)
    heads: str | None = None  # (path) -> int; None: transformer/config.json's num_attention_heads
    teacache: tuple[float, ...] | None = None  # TeaCache rescale polynomial (highest power first)
    # "module:Class" of the diffusers LoRA loader mixin whose lora_state_dict reads the family's LoRA
    # files (its _lora_loadable_modules: the components adapters go into); None: LoRA refused.
    lora: str | None = None
    # "module:attribute" of the family's LoRA key renames (pipedit.lora.forms.Rename, ...): pipedit's own
    # reading of the trainers' forms; None with `lora` None: LoRA refused.
    lora_names: str | None = None
    hub: Hub | None = None  # what a hub id fetches; None: the whole repo
    default: bool = False  # the family used when neither a model name nor a model path names one
    order: int = 100  # where lists and error texts name it among the families (lowest first)
    # What refusals name this family for, by capability (pipedit.fields): (its place in the list of
    # the families that take it, the words naming it: "wan with an image-to-video checkpoint ...").
    takes: tuple[tuple[str, int, str], ...] = ()
    benches: frozenset[str] = frozenset()  # benchmarks that run its demo model by default (BENCHES)
    check_preset: str | None = None  # () -> Path: the model `pipedit check-node` runs on a GPU node
    # (vae config, latent shape, dtype) -> bytes: the untiled VAE decode's peak (`pipedit bench vae`)
    vae_predictor: str | None = None
    # model.quantize fp8: linear-layer name fragments (inside a block) kept in high precision on top
    # of the default rule (pipedit.runtime.fp8: norms, embeddings, modulation)
    fp8_keep: tuple[str, ...] = ()

    def load(self, target: str) -> Any:
        return load(target)

    def adapter_class(self) -> type:
        return load(self.adapter)


def load(target: str) -> Any:
    """The object a "module:attribute[.attribute]" target names."""
    module_name, _, attributes = target.partition(":")
    found = importlib.import_module(module_name)
    for attribute in attributes.split("."):
        found = getattr(found, attribute)
    return found


BENCHES = ("cache", "vae-ranks")  # `bench cache`'s default --models; `bench vae --ranks`' demo models
ENVIRONMENT = "PIPEDIT_FAMILIES"
_INTEGRATIONS = "pipedit.integrations"

_REGISTRY: dict[str, Family] = {}
_discovered = False


def _discover() -> dict[str, Family]:
    """The registry, filled from the family packages on first use."""
    global _discovered
    if not _discovered:
        _discovered = True
        integrations = importlib.import_module(_INTEGRATIONS)
        modules = [f"{_INTEGRATIONS}.{package.name}.family" for package in pkgutil.iter_modules(integrations.__path__)
                   if package.ispkg and importlib.util.find_spec(f"{_INTEGRATIONS}.{package.name}.family")]
        modules += [name.strip() for name in os.environ.get(ENVIRONMENT, "").split(",") if name.strip()]
        found = [_declared(name) for name in modules]
        for entry in sorted(found, key=lambda entry: entry.order):
            register(entry)
    return _REGISTRY


def _declared(module_name: str) -> Family:
    try:
        entry = getattr(importlib.import_module(module_name), "FAMILY", None)
    except ImportError as error:
        raise ModelPathError(f"family module {module_name} (from {ENVIRONMENT} or pipedit.integrations) does not "
                             f"import: {error}") from error
    if not isinstance(entry, Family):
        raise ModelPathError(f"{module_name} declares no FAMILY = pipedit.families.Family(...)")
    return entry


def default_name() -> str:
    """The family used when neither a model name nor a model path names one."""
    return next(entry.name for entry in _discover().values() if entry.default)


def __getattr__(name: str) -> Any:
    if name == "DEFAULT":  # the default family's name, once the packages are discovered
        return default_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def demo_model(name: str | None = None) -> Path:
    """The tiny demo checkpoint of `name`'s family (default: DEFAULT's), built on first use on this
    machine and reused afterwards."""
    entry = family(name or default_name())
    return entry.load(entry.demo.ensure)()


def register(entry: Family) -> Family:
    """Adds (or replaces) a family; its pipelines must not be served by another family."""
    for other in _discover().values():
        shared = set(other.pipelines) & set(entry.pipelines)
        if other.name != entry.name and shared:
            raise ValueError(f"{entry.name} and {other.name} both serve {', '.join(sorted(shared))}")
    _REGISTRY[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    _discover().pop(name, None)


def family_names() -> tuple[str, ...]:
    return tuple(_discover())


def families() -> tuple[Family, ...]:
    return tuple(_discover().values())


def family(name: str) -> Family:
    found = _discover().get(name)
    if found is None:
        raise ModelPathError(f"unknown model {name!r}; supported models: {', '.join(_discover())}")
    return found


def find(name: str) -> Family | None:
    """The family called `name`, or None (for names that may be a test's or an unknown adapter's)."""
    return _discover().get(name)


def pipelines() -> tuple[str, ...]:
    return tuple(sorted(p for entry in _discover().values() for p in entry.pipelines))


def family_for_pipeline(class_name: str, where: str | Path | None = None) -> Family:
    """The family serving model_index.json's `_class_name`; ModelPathError naming the known ones."""
    holder = f"{where} holds a {class_name}" if where is not None else f"unknown pipeline {class_name!r}"
    for entry in _discover().values():
        if class_name in entry.pipelines:
            return entry
        if (adds := dict(entry.refuses).get(class_name)) is not None:
            raise ModelPathError(f"{holder}: {adds}, which pipedit does not run; for {entry.name} it serves "
                                 f"{', '.join(entry.pipelines)} checkpoints")
    raise ModelPathError(f"{holder}; supported pipelines: {', '.join(pipelines())}")


def read_model_index(path: str | Path) -> dict[str, Any]:
    root = Path(path)
    if not root.is_dir():
        raise ModelPathError(f"model path {root} does not exist or is not a directory")
    index_file = root / "model_index.json"
    if not index_file.is_file():
        raise ModelPathError(
            f"{index_file} is missing: the model path must be a diffusers-layout checkpoint folder"
        )
    try:
        index = json.loads(index_file.read_text())
    except json.JSONDecodeError as error:
        raise ModelPathError(f"{index_file} is not valid JSON ({error})") from error
    if not isinstance(index, dict) or "_class_name" not in index:
        raise ModelPathError(f"{index_file} has no _class_name: it does not describe a diffusers pipeline")
    return index


def family_of_checkpoint(path: str | Path, name: str | None = None) -> Family:
    """`name`'s family when given; else the one serving model_index.json's pipeline; else the one
    family whose own release layout the folder matches. ModelPathError naming what was expected."""
    if name is not None:
        return family(name)
    root = Path(path)
    if not root.is_dir():
        raise ModelPathError(f"model path {root} does not exist or is not a directory")
    if (root / "model_index.json").is_file():
        return family_for_pipeline(read_model_index(root)["_class_name"], path)
    matches = [entry for entry in _discover().values() if entry.layout and load(entry.layout)(root)]
    if len(matches) == 1:
        return matches[0]
    found = (f"matches several layouts ({', '.join(entry.name for entry in matches)})" if matches
             else "model_index.json is missing")
    layouts = "".join(f" or {entry.layout_about}" for entry in _discover().values() if entry.layout)
    raise ModelPathError(
        f"{root}: {found}; expected a diffusers-layout checkpoint (model_index.json){layouts}; name the model "
        f"with --model ({', '.join(_discover())})"
    )


def full_size_models() -> dict[str, Any]:
    """{release name: () -> ModelSpec} over every family (the planner's full-size models)."""
    found: dict[str, Any] = {}
    for entry in _discover().values():
        found.update(load(entry.planner.full_size))
    return found


def family_for_release(name: str) -> Family:
    """The family of a family name or of one of its full-size releases (wan-14b: wan)."""
    if name in _discover():
        return _discover()[name]
    for entry in _discover().values():
        if name in load(entry.planner.full_size):
            return entry
    raise ModelPathError(f"unknown model {name!r}; supported models: {', '.join(_discover())} "
                         f"(full-size: {', '.join(full_size_models())})")


def accepting(option: str) -> tuple[str, ...]:
    """The families whose adapters take loading option `option`."""
    return tuple(entry.name for entry in _discover().values() if option in entry.options)


def takers(capability: str) -> tuple[str, ...]:
    """The words naming the families that take `capability`, in the order refusals list them."""
    found = [(place, words) for entry in _discover().values() for taken, place, words in entry.takes
             if taken == capability]
    return tuple(words for _, words in sorted(found))


def benched(bench: str) -> tuple[str, ...]:
    """The families whose demo models benchmark `bench` (one of BENCHES) runs by default."""
    return tuple(entry.name for entry in _discover().values() if bench in entry.benches)


def check_node_model() -> Path | None:
    """The model `pipedit check-node` runs on a GPU node (the first family naming one; built once)."""
    for entry in _discover().values():
        if entry.check_preset:
            return load(entry.check_preset)()
    return None


def teacache_families() -> tuple[str, ...]:
    return tuple(sorted(entry.name for entry in _discover().values() if entry.teacache is not None))
