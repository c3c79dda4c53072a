"""What the cost model needs to know about a model, read from its configs.

A ModelSpec holds a DiT's widths, depths and parameter counts, its VAE's config and its text
encoders. Each family's planner module (its pipedit.families entry's `planner`) builds the specs of
its full-size releases and reads the same fields from a checkpoint's configs, so the demo models
and synthetic checkpoints are planned from their real widths; the helpers below read configs and
parameter counts for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import families
from ..errors import UserInputError

@dataclass(frozen=True)
class TextEncoder:
    name: str
    params: float  # parameters
    tokens: int  # tokens per prompt it runs on


@dataclass(frozen=True)
class SideStream:
    """A second token stream every block runs beside the video tokens (LTX-2's audio), kept whole on
    every rank: its tokens are few (LTX-2: 25 a second against thousands of video tokens), so its own
    work is replicated, not divided. Per block: its self-attention, cross-attention to the text and
    MLP at width `hidden`, and one attention each way with the video tokens at width `exchange_width`
    (video queries over its keys and values; its queries over the video's)."""

    hidden: int
    mlp_ratio: float
    tokens_per_frame: float  # its tokens per output video frame (LTX-2: 25 a second at 24 fps)
    exchange_width: int

    def tokens(self, frames: int) -> int:
        return round(frames * self.tokens_per_frame)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # its pipedit.families name
    hidden: int
    heads: int
    head_dim: int
    dual_layers: int  # blocks whose text tokens have their own projections (HunyuanVideo)
    single_layers: int  # blocks over one joint or video-only stream
    mlp_ratio: float
    text_tokens: int  # text tokens joining self-attention (HunyuanVideo) or cross-attended (OpenSoraPlan)
    cross_attention: bool  # text enters by cross-attention (OpenSoraPlan), else joint attention
    sparse_layers: int = 0  # Skiparse layers: attention within sparse_n sub-sequences
    sparse_n: int = 1
    cfg_batch: int = 1  # 2: classifier-free guidance runs cond and uncond together
    dit_params: float = 0.0
    dit_bytes_per_param: float = 2  # bf16 serving; about 1.0 with model.quantize fp8 (planner.memory)
    patch: tuple[int, int, int] = (1, 2, 2)  # (t, h, w)
    latent_channels: int = 16
    vae: dict = field(default_factory=dict)
    vae_params: float = 0.0
    text_encoders: tuple[TextEncoder, ...] = ()
    experts: int = 1  # transformers switched during denoising (Wan2.2 A14B: 2), same size each
    vae_tiling: bool = True  # spatially tiled decoding is available (Wan decodes untiled only)
    text_beside_vae: bool = False  # the text encoders live on a decode rank when there is one
    lora_bytes: float = 0.0  # unfused LoRA adapters every denoise rank holds (pipedit.planner.memory.adapter_bytes)
    # Bytes of one expert's checkpoint files in their own dtype (0: unknown, taken as dit_params x
    # dit_bytes_per_param); float32 files hold twice a bf16 expert (pipedit.planner.memory).
    expert_file_bytes: float = 0.0
    side_stream: SideStream | None = None  # a second token stream beside the video's (pipedit.planner.cost)

    @property
    def layers(self) -> int:
        return self.dual_layers + self.single_layers

    @property
    def compression(self) -> tuple[int, int]:
        return self.vae["temporal_compression_ratio"], self.vae["spatial_compression_ratio"]

    def latent_shape(self, height: int, width: int, frames: int) -> tuple[int, int, int]:
        """(latent frames, latent height, latent width)."""
        t, s = self.compression
        return (frames - 1) // t + 1, height // s, width // s

    def video_tokens(self, height: int, width: int, frames: int) -> int:
        lt, lh, lw = self.latent_shape(height, width, frames)
        pt, ph, pw = self.patch
        return -(-lt // pt) * (lh // ph) * (lw // pw)

    @property
    def text_params(self) -> float:
        return sum(e.params for e in self.text_encoders)


def model_names() -> tuple[str, ...]:
    """The full-size models every registered family plans."""
    return tuple(families.full_size_models())


def full_size(name: str) -> ModelSpec:
    sizes = families.full_size_models()
    if name not in sizes:
        raise UserInputError(f"unknown model '{name}'; models: {', '.join(sizes)}")
    return sizes[name]()


def read_config(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserInputError(f"{path} is missing or not JSON ({error}); --model-path needs a "
                             f"diffusers-layout checkpoint with transformer/ and vae/ configs") from error


def param_count(folder: Path) -> float | None:
    """Parameters from safetensors headers (no weights are read), or None."""
    total = 0
    files = sorted(folder.glob("*.safetensors"))
    for file in files:
        with file.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for key, entry in header.items():
            if key != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return float(total) if files else None


def checkpoint_text_encoders(root: Path, default: tuple[TextEncoder, ...]) -> tuple[TextEncoder, ...]:
    found = []
    for encoder, tokens in (("text_encoder", 256), ("text_encoder_2", 77)):
        params = param_count(root / encoder)
        if params is not None:
            found.append(TextEncoder(encoder, params, tokens))
    return tuple(found) or default


def from_checkpoint(path: str | Path, family: str | None = None) -> ModelSpec:
    """A spec with the widths, depths and parameter counts of the checkpoint at `path` (family:
    pipedit.families' default when None)."""
    entry = families.family(family or families.default_name())
    return families.load(entry.planner.from_checkpoint)(Path(path))


def with_param_counts(spec: ModelSpec, transformer: Path, root: Path) -> ModelSpec:
    return replace(spec, dit_params=param_count(transformer) or spec.dit_params,
                   vae_params=param_count(root / "vae") or spec.vae_params)


def family_of(path: str | Path) -> str:
    """The model family of a checkpoint (pipedit.families.family_of_checkpoint): its
    model_index.json's pipeline, else the family release layout it matches; ModelPathError
    naming the known pipelines otherwise."""
    return families.family_of_checkpoint(path).name
