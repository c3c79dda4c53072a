"""The model-adapter seam: what the engine needs from a text-to-video model, and the registry
that finds the adapter for a checkpoint. Model code knows nothing about parallelism; the engine
and its workers apply parallel attention from outside."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .errors import ModelPathError

# pipeline class in model_index.json -> "module:class" of the adapter, imported lazily.
_ADAPTERS: dict[str, str] = {
    "HunyuanVideoPipeline": "pipedit.integrations.hunyuan_video.adapter:HunyuanVideoAdapter",
}

# Which parts of a model a worker loads: denoise ranks never need the VAE, decode ranks never the DiT.
ALL_PARTS = frozenset({"text", "dit", "vae"})


@dataclass(frozen=True)
class VideoShape:
    height: int
    width: int
    num_frames: int


class ModelAdapter(Protocol):
    """One model family. Loads the parts a rank's role needs (`parts`); shapes come from the
    component configs, so every role can validate requests and size buffers."""

    family: str
    preferred_text_encoder: str  # "dit" or "vae": which group holds the text encoders by default
    components: dict[str, Any]
    device: torch.device
    dtype: torch.dtype | None  # as requested; None: each component's library default
    num_heads: int

    def validate(self, shape: VideoShape, steps: int) -> None:
        """Raises InvalidRequestError naming what is allowed."""

    def encode_prompt(self, prompt: str) -> dict[str, torch.Tensor]: ...

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """On the denoise ranks, once per request, on host tensors: the condition the DiT sees
        (e.g. padded text tokens dropped, so attention needs no key mask)."""

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        """Text tokens the DiT attends to for this condition (sizes Aco's messages)."""

    def latent_shape(self, shape: VideoShape) -> tuple[int, ...]: ...

    def prepare_latents(self, shape: VideoShape, generator: torch.Generator) -> torch.Tensor: ...

    def make_scheduler(self, steps: int) -> tuple[Any, torch.Tensor]:
        """A fresh scheduler with its timesteps set (schedulers are stateful: one per request)."""

    def predict_noise(self, latents: torch.Tensor, timestep: torch.Tensor, cond: dict[str, torch.Tensor],
                      guidance_scale: float) -> torch.Tensor: ...

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents [B, C, T, h, w] -> frames [B, F, H, W, 3] float in [0, 1]."""

    def attention_shape(self, shape: VideoShape) -> Any:
        """The DiT's attention call for this video (pipedit.attention.autotune.AttentionShape)."""

    def enable_sequence_parallel(self, ctx: Any, strategy: Any) -> int:
        """Routes the DiT's attention through `strategy` and shards its sequence over ctx's ranks
        from outside the model code; returns the attention calls per forward it routed."""


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


def attention_heads(path: str | Path) -> int:
    """The DiT's attention head count, read from its config without loading weights."""
    config_file = Path(path) / "transformer" / "config.json"
    try:
        return int(json.loads(config_file.read_text())["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelPathError(f"{config_file} is missing or has no num_attention_heads ({error})") from error


def adapter_class_for(path: str | Path) -> type:
    """The adapter for the checkpoint at `path`; ModelPathError if none supports it."""
    index = read_model_index(path)
    target = _ADAPTERS.get(index["_class_name"])
    if target is None:
        raise ModelPathError(
            f"{path} holds a {index['_class_name']}; supported pipelines: {', '.join(sorted(_ADAPTERS))}"
        )
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def load_adapter(path: str | Path, *, parts=ALL_PARTS, device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None, vae_tiling: str = "auto") -> ModelAdapter:
    return adapter_class_for(path).from_pretrained(path, parts=frozenset(parts), device=device, dtype=dtype,
                                                   vae_tiling=vae_tiling)


def shape_validator(path: str | Path):
    """The model's own `validate(VideoShape, steps)`, from its configs only (no weights load):
    what the server and the batch renderer check requests with before the engine sees them."""
    return adapter_class_for(path).from_pretrained(path, parts=frozenset()).validate
