"""What the dry run runs: a config resolved the way the engine resolves it on the GPUs of a
profile, the model's configs (a checkpoint folder's, or the released ones written to a temporary
folder), and the planner's view of the same layout.

Resolution differs from a real start in four named ways: the device is CPU (fake tensors;
memory does not depend on it), `pipesp_chunk: auto` (a timing measurement) runs synchronous
Ulysses (give a chunk in the config to check PipeSP's buffers), `decode_ranks: auto` takes
the planner's choice for the --gpu profile (what the engine does on a profiled GPU without a
cached calibration), and `model.compile: true` runs the blocks eagerly (the report says so).
An image-to-video model gets calibration's placeholder image.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from .. import families
from ..adapter import attention_heads, model_inputs, model_name_for
from ..config import EngineConfig
from ..errors import UserInputError
from ..images import placeholder_for
from ..planner import split_denoise_ranks
from ..planner.cost import Shape
from ..planner.auto import best_with_decode_ranks
from ..planner.hardware import PROFILES
from ..planner.memory import with_quantize
from ..planner.models import ModelSpec, from_checkpoint, full_size
from ..request import VideoRequest
from ..runtime.layout import WorldLayout
from .released import released_checkpoint

@dataclass(frozen=True)
class DryWorld:
    config: EngineConfig
    layout: WorldLayout
    model: str  # the model name (a family or one of its full-size releases)
    model_path: str
    released: bool  # the released configs (no --model-path)
    spec: ModelSpec  # the planner's model of the same configs
    request: VideoRequest
    gpu: str
    capacity: float  # bytes per GPU
    compile_ran_eager: bool = False  # the config asked for model.compile; the dry run runs eager


def resolve(config: EngineConfig, *, model: str | None, model_path: str | None, height: int | None,
            width: int | None, frames: int | None, steps: int, gpu: str, workdir: str | None = None) -> DryWorld:
    if gpu not in PROFILES:
        raise UserInputError(f"unknown --gpu {gpu!r}; profiles: {', '.join(PROFILES)}")
    if model_path:  # a hub id: its configs, all a dry run reads
        from ..hub import model_configs

        model_path = str(model_configs(model_path))
    shown = model or config.model.name or (model_name_for(model_path) if model_path else families.DEFAULT)
    name = families.family_for_release(shown).name  # the adapter's (a release's family)
    released = model_path is None
    if released:
        model_path = str(released_checkpoint(shown, Path(workdir or tempfile.mkdtemp(prefix="pipedit-dryrun-"))))
    spec = full_size(shown) if released else from_checkpoint(model_path, name)
    g = config.generation
    request = VideoRequest("dry run: a red fox running through snow", height=height or g.height,
                           width=width or g.width, num_frames=frames or g.num_frames, steps=steps, seed=0)
    # Image-to-video: calibration's placeholder image (its size does not matter: the image is
    # resized to the video's before it is encoded).
    request = placeholder_for(request, model_inputs(model_path, name).capabilities.needs_image)
    # model.compile: eager. torch.compile cannot trace fake tensors of another device's kernels,
    # and the compiled blocks keep the eager blocks' shapes and the same collectives around them.
    # model.quantize, model.attention: the planner counts the float8 weights (spec); the fake ranks
    # run the serving dtype and the reference kernels (neither float8 matmuls nor GPU kernels on a CPU).
    spec = with_quantize(spec, config.model.quantize)
    model_config = replace(config.model, name=name, path=model_path, device="cpu", compile=False,
                           quantize="none", attention="auto",
                           text_encoder_path=None if released else config.model.text_encoder_path,
                           dtype="bfloat16" if config.model.dtype == "auto" else config.model.dtype)
    from ..adapter import adapter_class_for

    adapter_class = adapter_class_for(model_path, name)
    parallel = _parallel(config, spec, request, gpu, attention_heads(model_path, name))
    asked_compile = config.model.compile
    config = replace(config, model=model_config, parallel=parallel)
    return DryWorld(config, WorldLayout.from_config(parallel, adapter_class.preferred_text_encoder), shown,
                    model_path, released, spec, request, gpu, PROFILES[gpu].memory, asked_compile)


def _parallel(config: EngineConfig, spec: ModelSpec, request: VideoRequest, gpu: str, heads: int):
    parallel = config.parallel
    if parallel.pipesp_chunk == "auto":
        parallel = replace(parallel, pipesp_chunk="off")
    if parallel.decode_ranks != "auto":
        return parallel
    best = best_with_decode_ranks(spec, gpu, parallel.ranks, Shape(request.height, request.width, request.num_frames),
                                  config.generation.steps, getattr(config.model, "idle_expert", "resident"))
    decode = best.candidate.decode_ranks if best is not None else 1
    ulysses, ring = split_denoise_ranks(parallel.ranks - decode, heads)
    return replace(parallel, decode_ranks=decode, ulysses=ulysses, ring=ring, ranks=None)
