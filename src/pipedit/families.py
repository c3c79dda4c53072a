"""The model families pipedit serves, one registry entry each.

An entry holds what the rest of pipedit needs to know about a family besides its model code: the
name users type (--model, config model.name, the adapter's `family`), the adapter class, the
diffusers pipelines it serves, how the planner and the dry run model it, its demo checkpoints and
its step-cache coefficients. Code is named by "module:attribute" targets, imported on first use:
importing this registry imports no model code (nor torch).

Adding a family: an integrations/<family>/ package with its adapter and demo checkpoint, the
planner's spec and VAE cost functions it points at, and one `Family(...)` below.
"""

from __future__ import annotations

import importlib
import json
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
    decode_split: str  # how a decode splits over decode ranks (planner.split_decode's forms)


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
class Family:
    name: str  # the one spelling: --model, model.name, the adapter's `family`, ModelSpec.family
    adapter: str  # "module:Class" of the ModelAdapter
    planner: Planner
    demo: Demo
    dry_run: DryRun
    pipelines: tuple[str, ...] = ()  # model_index.json _class_name values this family serves
    layout: str | None = None  # (path) -> bool: the folder holds the family's own release layout
    layout_about: str = ""  # that layout in words, for the error naming what a model path may hold
    options: frozenset[str] = frozenset()  # load_adapter options it takes (LOADING_OPTIONS)
    heads: str | None = None  # (path) -> int; None: transformer/config.json's num_attention_heads
    teacache: tuple[float, ...] | None = None  # TeaCache rescale polynomial (highest power first)
    # "module:Class" of the diffusers LoRA loader mixin whose lora_state_dict reads the family's LoRA
    # files (its _lora_loadable_modules: the components adapters go into); None: LoRA refused.
    lora: str | None = None

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


_INTEGRATIONS = "pipedit.integrations"

_REGISTRY: dict[str, Family] = {}

DEFAULT = "hunyuan-video"  # the family used when neither a model name nor a model path names one


def demo_model(name: str | None = None) -> Path:
    """The tiny demo checkpoint of `name`'s family (default: DEFAULT's), built on first use on this
    machine and reused afterwards."""
    entry = family(name or DEFAULT)
    return entry.load(entry.demo.ensure)()


def register(entry: Family) -> Family:
    """Adds (or replaces) a family; its pipelines must not be served by another family."""
    for other in _REGISTRY.values():
        shared = set(other.pipelines) & set(entry.pipelines)
        if other.name != entry.name and shared:
            raise ValueError(f"{entry.name} and {other.name} both serve {', '.join(sorted(shared))}")
    _REGISTRY[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def family_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def families() -> tuple[Family, ...]:
    return tuple(_REGISTRY.values())


def family(name: str) -> Family:
    found = _REGISTRY.get(name)
    if found is None:
        raise ModelPathError(f"unknown model {name!r}; supported models: {', '.join(_REGISTRY)}")
    return found


def find(name: str) -> Family | None:
    """The family called `name`, or None (for names that may be a test's or an unknown adapter's)."""
    return _REGISTRY.get(name)


def pipelines() -> tuple[str, ...]:
    return tuple(sorted(p for entry in _REGISTRY.values() for p in entry.pipelines))


def family_for_pipeline(class_name: str, where: str | Path | None = None) -> Family:
    """The family serving model_index.json's `_class_name`; ModelPathError naming the known ones."""
    for entry in _REGISTRY.values():
        if class_name in entry.pipelines:
            return entry
    holder = f"{where} holds a {class_name}" if where is not None else f"unknown pipeline {class_name!r}"
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
    matches = [entry for entry in _REGISTRY.values() if entry.layout and load(entry.layout)(root)]
    if len(matches) == 1:
        return matches[0]
    found = (f"matches several layouts ({', '.join(entry.name for entry in matches)})" if matches
             else "model_index.json is missing")
    layouts = "".join(f" or {entry.layout_about}" for entry in _REGISTRY.values() if entry.layout)
    raise ModelPathError(
        f"{root}: {found}; expected a diffusers-layout checkpoint (model_index.json){layouts}; name the model "
        f"with --model ({', '.join(_REGISTRY)})"
    )


def full_size_models() -> dict[str, Any]:
    """{release name: () -> ModelSpec} over every family (the planner's full-size models)."""
    found: dict[str, Any] = {}
    for entry in _REGISTRY.values():
        found.update(load(entry.planner.full_size))
    return found


def family_for_release(name: str) -> Family:
    """The family of a family name or of one of its full-size releases (wan-14b: wan)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    for entry in _REGISTRY.values():
        if name in load(entry.planner.full_size):
            return entry
    raise ModelPathError(f"unknown model {name!r}; supported models: {', '.join(_REGISTRY)} "
                         f"(full-size: {', '.join(full_size_models())})")


def accepting(option: str) -> tuple[str, ...]:
    """The families whose adapters take loading option `option`."""
    return tuple(entry.name for entry in _REGISTRY.values() if option in entry.options)


def teacache_families() -> tuple[str, ...]:
    return tuple(sorted(entry.name for entry in _REGISTRY.values() if entry.teacache is not None))


# -- the families ---------------------------------------------------------------------------------
register(Family(
    name="hunyuan-video",
    adapter=f"{_INTEGRATIONS}.hunyuan_video.adapter:HunyuanVideoAdapter",
    pipelines=("HunyuanVideoPipeline",),
    planner=Planner(full_size="pipedit.planner.models:HUNYUAN_VIDEO_SIZES",
                    from_checkpoint="pipedit.planner.models:hunyuan_video_from_checkpoint",
                    vae_flops="pipedit.planner.vae_cost:hunyuan_video_flops",
                    vae_peak="pipedit.planner.memory:hunyuan_video_decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:PASSES_AND_TILES"),
    demo=Demo(ensure=f"{_INTEGRATIONS}.hunyuan_video.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_INTEGRATIONS}.hunyuan_video.presets:write_preset",
              presets=f"{_INTEGRATIONS}.hunyuan_video.presets:described"),
    dry_run=DryRun(released="pipedit.dryrun.released:write_hunyuan_video",
                   fakes=((f"{_INTEGRATIONS}.hunyuan_video.adapter:load_component",
                           "pipedit.dryrun.models:fake_component"),),
                   tiling=f"{_INTEGRATIONS}.hunyuan_video.adapter"),
    # ali-vilab/TeaCache, TeaCache4HunyuanVideo/teacache_sample_video.py (teacache_forward),
    # fitted by the TeaCache authors on the modulated input of double_blocks[0] (img_norm1 then
    # img_mod shift/scale).
    teacache=(7.33226126e02, -4.01131952e02, 6.75869174e01, -3.14987800e00, 9.61237896e-02),
    lora="diffusers.loaders.lora_pipeline:HunyuanVideoLoraLoaderMixin",
))

register(Family(
    name="opensora-plan",
    adapter=f"{_INTEGRATIONS}.opensora_plan.adapter:OpenSoraPlanAdapter",
    # diffusers has no Open-Sora-Plan pipeline: a model_index.json naming this one holds the
    # release's transformer and vae configs (the planner reads them from transformer/ and vae/).
    pipelines=("OpenSoraPlanPipeline",),
    layout=f"{_INTEGRATIONS}.opensora_plan.checkpoint:is_official_layout",
    layout_about="the official Open-Sora-Plan v1.3 layout (any93x640x640/ and vae/)",
    options=frozenset({"text_encoder_path"}),
    heads=f"{_INTEGRATIONS}.opensora_plan.adapter:OpenSoraPlanAdapter.config_heads",
    planner=Planner(full_size="pipedit.planner.models:OPENSORA_PLAN_SIZES",
                    from_checkpoint="pipedit.planner.models:opensora_plan_from_checkpoint",
                    vae_flops="pipedit.planner.vae_cost:opensora_plan_flops",
                    vae_peak="pipedit.planner.memory:wfvae_decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:ROW_BANDS"),
    demo=Demo(ensure=f"{_INTEGRATIONS}.opensora_plan.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_INTEGRATIONS}.opensora_plan.demo_checkpoint:write_demo_checkpoint",
              about="a tiny model in the official v1.3 layout (any93x640x640/, vae/, text_encoder/)"),
    dry_run=DryRun(released="pipedit.dryrun.released:write_opensora_plan",
                   fakes=((f"{_INTEGRATIONS}.opensora_plan.adapter:load_text_encoder",
                           "pipedit.dryrun.models:fake_mt5_encoder"),
                          (f"{_INTEGRATIONS}.opensora_plan.transformer:load_transformer",
                           "pipedit.dryrun.models:fake_osp_transformer"),
                          (f"{_INTEGRATIONS}.opensora_plan.wfvae:load_wfvae", "pipedit.dryrun.models:fake_wfvae"))),
    # TeaCache's Open-Sora-Plan set (eval/teacache/experiments/opensora_plan.py) belongs to v1.1
    # (Latte-style spatial + temporal blocks), another architecture than v1.3's: none published.
    teacache=None,
))

register(Family(
    name="wan",
    adapter=f"{_INTEGRATIONS}.wan.adapter:WanAdapter",
    pipelines=("WanPipeline", "WanImageToVideoPipeline"),
    options=frozenset({"idle_expert"}),
    lora="diffusers.loaders.lora_pipeline:WanLoraLoaderMixin",
    planner=Planner(full_size="pipedit.planner.models:WAN_SIZES",
                    from_checkpoint="pipedit.planner.models:wan_from_checkpoint",
                    vae_flops="pipedit.planner.vae_cost:wan_flops",
                    vae_peak="pipedit.planner.memory:wan_decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT"),
    demo=Demo(ensure=f"{_INTEGRATIONS}.wan.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_INTEGRATIONS}.wan.demo_checkpoint:write_preset",
              presets=f"{_INTEGRATIONS}.wan.presets:described",
              about="a tiny Wan in the diffusers layout (the --preset names which)"),
    dry_run=DryRun(released="pipedit.dryrun.released_wan:write_wan_release",
                   fakes=((f"{_INTEGRATIONS}.wan.adapter:load_component", "pipedit.dryrun.models:fake_component"),
                          (f"{_INTEGRATIONS}.wan.adapter:encode_text", "pipedit.dryrun.models:fake_umt5_encode"),
                          (f"{_INTEGRATIONS}.wan.image_condition:first_frame_video",
                           "pipedit.dryrun.models:fake_first_frame_video"))),
))

register(Family(
    name="hunyuan-video-1.5",
    adapter=f"{_INTEGRATIONS}.hunyuan_video_15.adapter:HunyuanVideo15Adapter",
    pipelines=("HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"),
    planner=Planner(full_size="pipedit.planner.hunyuan_video_15:SIZES",
                    from_checkpoint="pipedit.planner.hunyuan_video_15:from_checkpoint",
                    vae_flops="pipedit.planner.hunyuan_video_15:decode_flops",
                    vae_peak="pipedit.planner.hunyuan_video_15:decode_peak_bytes",
                    decode_split="pipedit.planner.split_decode:UNSPLIT"),
    demo=Demo(ensure=f"{_INTEGRATIONS}.hunyuan_video_15.demo_checkpoint:ensure_demo_checkpoint",
              write=f"{_INTEGRATIONS}.hunyuan_video_15.demo_checkpoint:write_preset",
              presets=f"{_INTEGRATIONS}.hunyuan_video_15.presets:described",
              about="a tiny HunyuanVideo 1.5 in the diffusers layout (the --preset names which)"),
    dry_run=DryRun(released="pipedit.dryrun.released_hunyuan_video_15:write_release",
                   fakes=((f"{_INTEGRATIONS}.hunyuan_video_15.adapter:load_component",
                           "pipedit.dryrun.hunyuan_video_15:fake_hunyuan_video_15_component"),
                          (f"{_INTEGRATIONS}.hunyuan_video_15.adapter:encode_mllm",
                           "pipedit.dryrun.hunyuan_video_15:fake_qwen_encode"),
                          (f"{_INTEGRATIONS}.hunyuan_video_15.adapter:encode_glyphs",
                           "pipedit.dryrun.hunyuan_video_15:fake_byt5_encode"),
                          (f"{_INTEGRATIONS}.hunyuan_video_15.image_condition:image_pixels",
                           "pipedit.dryrun.hunyuan_video_15:fake_image_pixels")),
                   tiling=f"{_INTEGRATIONS}.hunyuan_video_15.adapter"),
    # No TeaCache coefficients are published for HunyuanVideo 1.5 (TeaCache's sets cover HunyuanVideo,
    # Wan2.1 and others): refused, fbcache runs.
    teacache=None,
    # diffusers 0.42.1 has no LoRA loader mixin for HunyuanVideo 1.5 (its transformer takes PEFT
    # adapters, but no pipeline reads LoRA files for it): refused.
    lora=None,
))
