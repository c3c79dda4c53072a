"""A run's LoRA adapters as the user gives them: `--lora PATH[:SCALE[:EXPERTS]]` (repeatable) or
config `model.lora`, a list of those strings or of mappings {path, scale, experts}.

EXPERTS names the transformers an adapter goes into, as diffusers' WanLoraLoaderMixin chooses
with `load_into_transformer_2`: `transformer` (the default, diffusers' too), `transformer_2` (Wan2.2
A14B's low-noise expert) or `both` (the adapter is loaded into each, as two load_lora_weights calls
do)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError

EXPERTS = {"transformer": ("transformer",), "transformer_2": ("transformer_2",),
           "both": ("transformer", "transformer_2")}


@dataclass(frozen=True)
class LoraSpec:
    path: str
    scale: float = 1.0
    experts: str = "transformer"  # a key of EXPERTS

    def __post_init__(self):
        if not isinstance(self.path, str) or not self.path.strip():
            raise UserInputError(f"a LoRA adapter needs a file path, got {self.path!r}")
        scale = self.scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise UserInputError(f"LoRA scale must be a finite number, got {scale!r} (for {self.path})")
        object.__setattr__(self, "scale", float(scale))
        if self.experts not in EXPERTS:
            raise UserInputError(f"LoRA experts must be one of {', '.join(EXPERTS)}, got {self.experts!r} "
                                 f"(for {self.path})")

    @property
    def targets(self) -> tuple[str, ...]:
        """The transformer components this adapter goes into."""
        return EXPERTS[self.experts]

    def identity(self) -> str:
        """What changes the video: the file (absolute), its scale and experts."""
        return f"{Path(self.path).resolve()}:{self.scale!r}:{self.experts}"


def parse_lora(text: str) -> LoraSpec:
    """`PATH[:SCALE[:EXPERTS]]`; a trailing part that is neither a number nor an experts name
    belongs to the path."""
    parts = text.rsplit(":", 2)
    experts = "transformer"
    if len(parts) > 1 and parts[-1] in EXPERTS:
        experts = parts.pop()
    scale = 1.0
    if len(parts) > 1:
        try:
            scale = float(parts[-1])
            parts.pop()
        except ValueError:
            if experts != "transformer" or len(parts) == 3:
                raise UserInputError(f"--lora {text!r}: expected PATH[:SCALE[:EXPERTS]] with SCALE a number "
                                     f"and EXPERTS one of {', '.join(EXPERTS)}") from None
    return LoraSpec(":".join(parts), scale, experts)


def lora_specs(value, called: str = "model.lora") -> tuple[LoraSpec, ...]:
    """A config's or the flags' list: strings (parse_lora), mappings {path, scale, experts} or
    LoraSpecs; UserInputError naming the entry otherwise."""
    if value is None:
        return ()
    if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple)):
        raise UserInputError(f"{called} must be a list of adapters (PATH[:SCALE[:EXPERTS]] or "
                             f"{{path, scale, experts}}), got {value!r}")
    return tuple(_spec(entry, called) for entry in value)


def _spec(entry, called: str) -> LoraSpec:
    if isinstance(entry, LoraSpec):
        return entry
    if isinstance(entry, str):
        return parse_lora(entry)
    if isinstance(entry, dict):
        unknown = set(entry) - {"path", "scale", "experts"}
        if unknown or "path" not in entry:
            raise UserInputError(f"{called} entry {entry!r}: expected keys path (required), scale, experts")
        return LoraSpec(**entry)
    raise UserInputError(f"{called} entry {entry!r}: expected PATH[:SCALE[:EXPERTS]] or {{path, scale, experts}}")
