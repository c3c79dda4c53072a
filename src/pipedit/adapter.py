"""The model-adapter seam: what the engine needs from a text-to-video model, and the registry
that finds the adapter for a checkpoint. Model code knows nothing about parallelism; the engine
and its workers apply parallel attention from outside."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .capabilities import Capabilities
from .errors import InvalidRequestError, ModelPathError
from .fields import FIELDS
from .sampling import SamplingParams

from . import families as _families
from .families import family_of_checkpoint, read_model_index  # noqa: F401 (read_model_index: re-exported)

# Which parts of a model a worker loads: denoise ranks never need the VAE, decode ranks never the DiT.
ALL_PARTS = frozenset({"text", "dit", "vae"})


@dataclass(frozen=True)
class VideoShape:
    height: int
    width: int
    num_frames: int
    fps: int = 24  # the video's frame rate: a model with sound times its sound by it


def check_video_shape(shape: VideoShape, steps: int, *, size_multiple: int, frame_stride: int, model: str) -> None:
    """The checks every video model shares (sizes a multiple of the VAE x patch stride, frames
    frame_stride*k+1 for a causal video VAE, at least one step); errors name what is allowed."""
    m, r = size_multiple, frame_stride
    if shape.height < m or shape.width < m or shape.height % m or shape.width % m:
        raise InvalidRequestError(
            f"height and width must be positive multiples of {m} for {model}, got {shape.height}x{shape.width} "
            f"(e.g. {m * max(1, round(shape.height / m))}x{m * max(1, round(shape.width / m))})"
        )
    if shape.num_frames < 1 or (shape.num_frames - 1) % r:
        raise InvalidRequestError(
            f"num_frames must be {r}*k+1 (1, {r + 1}, {2 * r + 1}, {4 * r + 1}, ...) for {model}'s VAE, "
            f"got {shape.num_frames}"
        )
    if steps < 1:
        raise InvalidRequestError(f"steps must be at least 1, got {steps}")


def frames_from_vae(video: torch.Tensor) -> torch.Tensor:
    """A VAE's video [B, 3, F, H, W] in [-1, 1] -> frames [B, F, H, W, 3] float in [0, 1], as the
    diffusers pipelines postprocess it (OpenSoraPlan floors to the uint8 grid on top: its own)."""
    return (video.float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 4, 1)


class ComponentAccess:
    """adapter.<component> for the names in `component_names`, from `self.components`; a clear
    error when this rank's role did not load that component."""

    component_names: tuple[str, ...] = ()

    def __getattr__(self, name):
        # Only reached for names not found normally; __dict__ directly, so that an adapter still
        # being built (no `components` yet) raises AttributeError rather than recursing.
        components = self.__dict__.get("components", {})
        if name in type(self).component_names:
            if name not in components:
                raise RuntimeError(f"this worker did not load the {name} (its role does not need it)")
            return components[name]
        raise AttributeError(name)


class ModelAdapter(Protocol):
    """One model family. Loads the parts a rank's role needs (`parts`); shapes come from the
    component configs, so every role can validate requests and size buffers. The optional hooks
    (guidance per step, CFG branches, experts, step cache, split decode) are declared with their
    defaults on pipedit.model_hooks.AdapterHooks, which every adapter inherits."""

    family: str
    preferred_text_encoder: str  # "dit" or "vae": which group holds the text encoders by default
    components: dict[str, Any]
    device: torch.device
    dtype: torch.dtype | None  # as requested; None: each component's library default
    num_heads: int

    def validate(self, shape: VideoShape, steps: int) -> None:
        """Raises InvalidRequestError naming what is allowed."""

    # What a request may carry besides its prompt and which parallel paths run (an instance's
    # replaces the class's where the checkpoint decides, e.g. a Wan image-to-video pipeline).
    # check_inputs refuses the rest before any rank spends time on the request.
    capabilities: Capabilities

    def encode_prompt(self, prompt: str, negative_prompt: str | None = None, image: Any = None,
                      shape: VideoShape | None = None) -> dict[str, torch.Tensor]:
        """On the text rank. `negative_prompt` None: the model's default; `image` an RGB PIL image
        (pipedit.images.load_image) and the request's `shape` (the image condition depends on it),
        both passed only with an image, so only to models that take one; `shape` is passed with
        every prompt of a model with sound (capabilities.has_sound: its length follows the video)."""

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """On the denoise ranks, once per request, on host tensors: the condition the DiT sees
        (e.g. padded text tokens dropped, so attention needs no key mask)."""

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        """Text tokens the DiT attends to for this condition (sizes Aco's messages)."""

    def latent_shape(self, shape: VideoShape) -> tuple[int, ...]: ...

    def prepare_latents(self, shape: VideoShape, generator: torch.Generator) -> torch.Tensor:
        """Unit-variance initial noise, the request generator's first draw; the denoising job
        scales it by the scheduler's init_noise_sigma when the scheduler has one."""

    def make_scheduler(self, sampling: SamplingParams) -> tuple[Any, torch.Tensor]:
        """A fresh scheduler with its timesteps set for `sampling` (pipedit.sampling; built from a
        request by SamplingParams.of); schedulers are stateful: one per request."""

    def predict_noise(self, latents: torch.Tensor, timestep: torch.Tensor, cond: dict[str, torch.Tensor],
                      guidance_scale: float) -> torch.Tensor: ...

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents [B, C, T, h, w] -> frames [B, F, H, W, 3] float in [0, 1]."""

    def attention_shape(self, shape: VideoShape) -> Any:
        """The DiT's attention call for this video (pipedit.attention.autotune.AttentionShape)."""

    def enable_sequence_parallel(self, ctx: Any, strategy: Any) -> int:
        """Routes the DiT's attention through `strategy` and shards its sequence over ctx's ranks
        from outside the model code; returns the attention calls per forward it routed."""


class UnsupportedInputError(InvalidRequestError):
    """A request input the model does not take; `param` names its field (the API's 400 carries
    the field's API name)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class FieldRuleError(UnsupportedInputError):
    """A value the model takes, but not with the request's other values (the field's `rule`)."""


def _given(value) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def check_inputs(adapter, **values) -> None:
    """Refuses a value of a field (pipedit.fields) the model lacks the capability for, using the
    field's own refusal, an image-to-video checkpoint's missing image, and a value its field's
    rule refuses with the request's others (FieldRuleError). `values`: field name -> value (the
    image: its bytes or its file), None or blank text counting as not given."""
    family = getattr(adapter, "family", "this model")
    capabilities = getattr(adapter, "capabilities", Capabilities())  # no model known: none of them
    for name, value in values.items():
        spec = FIELDS[name]
        if spec.capability is not None and _given(value) and not getattr(capabilities, spec.capability):
            raise UnsupportedInputError(spec.refusal.format(family=family), name)
    if values.get("image") is None and capabilities.needs_image:
        raise UnsupportedInputError(f"this {family} checkpoint is image-to-video: send an image (png, jpeg or webp) "
                                    f"with the prompt", "image")
    for name, value in values.items():
        rule = FIELDS[name].rule
        if rule is not None and _given(value) and (problem := rule(values, capabilities)):
            raise FieldRuleError(problem, name)


def attention_heads(path: str | Path, model: str | None = None) -> int:
    """The DiT's attention head count, read from its config without loading weights."""
    entry = family_of_checkpoint(path, model)
    if entry.heads is not None:
        return entry.load(entry.heads)(path)
    config_file = Path(path) / "transformer" / "config.json"
    try:
        return int(json.loads(config_file.read_text())["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelPathError(f"{config_file} is missing or has no num_attention_heads ({error})") from error


def check_model_name(model: str) -> None:
    _families.family(model)


def model_name_for(path: str | Path, model: str | None = None) -> str:
    """`model` when given; else model_index.json's pipeline; else the one official release
    layout the folder matches. ModelPathError naming what was expected otherwise."""
    return family_of_checkpoint(path, model).name


def adapter_class_for(path: str | Path, model: str | None = None) -> type:
    """The adapter for the checkpoint at `path` (or the named model); ModelPathError if none supports it."""
    return family_of_checkpoint(path, model).adapter_class()


def load_adapter(path: str | Path, *, parts=ALL_PARTS, device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None, vae_tiling: str = "auto", model: str | None = None,
                 text_encoder_path: str | None = None, idle_expert: str = "resident") -> ModelAdapter:
    """idle_expert (model.idle_expert) reaches the adapters with two experts (Wan2.2 A14B); the
    others have nothing idle and ignore it. LoRA adapters are applied by the caller right after
    this returns (pipedit.lora.inject.apply_loras)."""
    entry = family_of_checkpoint(path, model)
    options = {}
    if "idle_expert" in entry.options:
        options["idle_expert"] = idle_expert
    if text_encoder_path:
        if "text_encoder_path" not in entry.options:
            raise ModelPathError(f"a text encoder path applies to {', '.join(_families.accepting('text_encoder_path'))} only, "
                                 f"not to {entry.name}")
        from .hub import text_encoder_folder

        options["text_encoder_path"] = text_encoder_folder(text_encoder_path, entry.name)  # a hub id: fetched here
    return entry.adapter_class().from_pretrained(path, parts=frozenset(parts), device=device, dtype=dtype,
                                                 vae_tiling=vae_tiling, **options)


def shape_validator(path: str | Path, model: str | None = None):
    """The model's own `validate(VideoShape, steps)`, from its configs only (no weights load):
    what the server and the batch renderer check requests with before the engine sees them."""
    return model_inputs(path, model).validate


def model_inputs(path: str | Path, model: str | None = None):
    """The model's adapter built from its configs only (no weights load, parts=frozenset()): its
    `validate` and the inputs it takes (its `capabilities`), for
    check_inputs before any model loads."""
    return adapter_class_for(path, model).from_pretrained(path, parts=frozenset())
