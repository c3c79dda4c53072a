"""A run's LoRA adapters as the user gives them: `--lora PATH[:SCALE[:EXPERTS]]` (repeatable) or
config `model.run_loras`, a list of those strings or of mappings {path, scale, experts}.

EXPERTS names the transformers an adapter goes into, as diffusers' WanLoraLoaderMixin chooses
with `load_into_transformer_2`: `transformer` (the default, diffusers' too), `transformer_2` (Wan2.2
A14B's low-noise expert) or `both` (the adapter is loaded into each, as two load_lora_weights calls
do)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError

# A scale multiplies an adapter's delta into every weight it touches: 1e30 or -1e308 is finite but
# overflows the weights (a black video). Adapters are run at scales of about -2 to 2; the bound leaves room.
SCALE_BOUND = 10.0
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
        problem = scale_problem(self.scale)
        if problem:
            raise UserInputError(f"LoRA scale must be {problem}, got {self.scale!r} (for {self.path})")
        object.__setattr__(self, "scale", float(self.scale))
        if self.experts not in EXPERTS:
            raise UserInputError(f"LoRA experts must be one of {', '.join(EXPERTS)}, got {self.experts!r} "
                                 f"(for {self.path})")

    @property
    def targets(self) -> tuple[str, ...]:
        """The transformer components this adapter goes into."""
        return EXPERTS[self.experts]

    def identity(self) -> str:
        """What changes the video: the file (absolute, or its hub id), its scale and experts."""
        from ..hub import hub_id

        where = self.path if hub_id(self.path) is not None else Path(self.path).resolve()
        return f"{where}:{self.scale!r}:{self.experts}"


def scale_problem(scale) -> str | None:
    """What a scale must be when `scale` is not that (a number within +-SCALE_BOUND), else None."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) \
            or abs(scale) > SCALE_BOUND:
        return f"a finite number between {-SCALE_BOUND:g} and {SCALE_BOUND:g}"
    return None


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


def lora_specs(value, called: str = "model.run_loras") -> tuple[LoraSpec, ...]:
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


# -- adapters a server offers by name (model.offered_loras) and a request's choice of them ---------------
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def named_loras(value, called: str = "model.offered_loras") -> tuple[tuple[str, LoraSpec], ...]:
    """config `model.offered_loras`: {NAME: PATH} or {NAME: {path, scale, experts}} -> ((name, spec), ...);
    a spec's scale is the name's default scale."""
    if value is None:
        return ()
    if isinstance(value, (tuple, list)) and all(isinstance(e, tuple) and len(e) == 2 for e in value):
        value = dict(value)  # already normalised (a copy of a config)
    if not isinstance(value, dict):
        raise UserInputError(f"{called} must map adapter names to files (NAME: PATH or NAME: {{path, scale, "
                             f"experts}}), got {value!r}")
    found = []
    for name, entry in value.items():
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise UserInputError(f"{called}: adapter name {name!r} must be 1 to 64 letters, digits, _ or -")
        spec = entry if isinstance(entry, LoraSpec) else LoraSpec(entry) if isinstance(entry, str) else \
            _spec(entry, f"{called}.{name}")
        found.append((name, spec))
    return tuple(found)


def request_loras(value, offered: tuple[tuple[str, LoraSpec], ...] | None = None,
                  error: type[UserInputError] = UserInputError) -> tuple[tuple[str, float | None], ...]:
    """A request's `loras`: [{"name": NAME, "scale": S}, ...] (scale left out: the name's default
    from `offered`; without `offered` it stays None) -> ((name, scale), ...). With `offered`, a name
    the server does not offer is refused naming the offered ones; a name given twice is refused."""
    if value is None:
        return ()
    if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple)):
        raise error(f"loras must be a list of {{\"name\": NAME, \"scale\": S}}, got {value!r}")
    defaults = dict(offered) if offered is not None else None
    chosen: list[tuple[str, float]] = []
    for entry in value:
        if isinstance(entry, tuple) and len(entry) == 2:
            entry = {"name": entry[0], "scale": entry[1]}
        if not isinstance(entry, dict) or set(entry) - {"name", "scale"} or not isinstance(entry.get("name"), str):
            raise error(f"loras entry {entry!r}: expected {{\"name\": NAME, \"scale\": S}} (scale optional)")
        name, scale = entry["name"], entry.get("scale")
        if defaults is not None and name not in defaults:
            names = ", ".join(defaults) or "none (this server offers no adapters)"
            raise error(f"loras: {name!r} is not an adapter this server offers; offered: {names}")
        if scale is None and defaults is not None:
            scale = defaults[name].scale
        if scale is not None and scale_problem(scale):
            raise error(f"loras: the scale of {name!r} must be {scale_problem(scale)}, got {scale!r}")
        if any(name == other for other, _ in chosen):
            raise error(f"loras: {name!r} is named twice")
        chosen.append((name, None if scale is None else float(scale)))
    return tuple(chosen)


@dataclass(frozen=True)
class LoraOffer:
    """The adapters a server (or a local render) offers requests by name: model.offered_loras, and
    model.max_gpu_loras, the most one request may choose."""

    named: tuple[tuple[str, LoraSpec], ...]
    most: int

    @classmethod
    def of(cls, model_config) -> "LoraOffer":
        return cls(model_config.offered_loras, model_config.max_gpu_loras)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.named]

    def choose(self, value, error: type[UserInputError] = UserInputError) -> tuple[tuple[str, float], ...]:
        return choose_loras(value, self.named, self.most, error)

    def identities(self, chosen) -> list[str]:
        """What the chosen adapters change a video with: each one's file, scale and experts."""
        specs = dict(self.named)
        return [f"{name}={specs[name].identity()}@{scale!r}" for name, scale in chosen]


def choose_loras(value, offered: tuple[tuple[str, LoraSpec], ...], most: int,
                 error: type[UserInputError] = UserInputError) -> tuple[tuple[str, float], ...]:
    """A request's `loras` on a server offering `offered` (model.offered_loras) with at most `most`
    (model.max_gpu_loras) on the device: ((name, scale), ...), a name's default scale where the
    request gives none; `error` naming the offered adapters for a name the server lacks, or when
    one request names more than fit on the device."""
    chosen = request_loras(value, offered, error=error)
    if len(chosen) > most:
        raise error(f"loras: {len(chosen)} adapters in one request, more than this server keeps on a device "
                    f"at once (model.max_gpu_loras = {most})")
    return chosen


NO_LORAS = LoraOffer((), 0)  # a server without model.offered_loras: every name is refused, naming none offered
