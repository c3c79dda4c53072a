"""The generation fields: what one video request may set, declared once.

Every interface derives its part from this table: `VideoRequest`, the config's `generation`
defaults (`GenerationDefaults`), the adapters' per-field `Capabilities` and `SamplingParams` are
classes built from it when their modules are imported; the CLI's flags (the tool commands' shape
flags too), the render JSONL keys and a line's identity, the API's create schema and the
response's echo, the options route and the page's form are built from it. Each field has one
validation (`GenerationField.check`), so every interface refuses a bad value with the same words;
only the name differs, the one the value came by (`num_inference_steps` in the API is `steps`
everywhere else). A rule between fields (`GenerationField.rule`) is checked by check_inputs
wherever a request's inputs are checked.

Adding a field: its entry below, or `register(GenerationField(...))` in a module named in the
PIPEDIT_FIELD_MODULES environment variable (imported at the end of this module, so before any
class is built from the table); plus the code that consumes it (an adapter, the denoising loop).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from dataclasses import MISSING, dataclass, field, make_dataclass
from typing import Any, Callable, Optional

from typing_extensions import Required, TypedDict  # pydantic reads typing's TypedDict only from Python 3.12

from . import families
from .errors import UserInputError


def _canonical_cache(value: Any) -> str:
    from .cache.spec import parse_cache

    return str(parse_cache(value))


def _canonical_loras(value: Any) -> tuple:
    from .lora.spec import request_loras

    return request_loras(value)


def _api_loras(value: tuple) -> list[dict]:
    return [dict(name=name, **({} if scale is None else {"scale": scale})) for name, scale in value]


class LoraChoice(TypedDict, total=False):
    """One entry of a request's `loras`: a named adapter the server offers (model.offered_loras), and its
    scale (left out: the name's default)."""

    name: Required[str]
    scale: float


@dataclass(frozen=True)
class GenerationField:
    name: str  # VideoRequest attribute, config `generation.<name>`, render JSONL key
    kind: type  # int, float, str, bytes (the image), or list (of `item`, checked by `canonical`)
    default: Any  # the config's default (None: the model's own, or the field it falls back to)
    description: str  # the API's description and the CLI's help
    low: float | None = None  # lower bound of a number, inclusive unless low_open
    low_open: bool = False  # the number must lie above `low` (a scheduler shift: > 0)
    high: float | None = None  # inclusive upper bound everywhere (a server may bound it lower: `limit`)
    limit: str | None = None  # the serve config's upper bound on a server (e.g. max_steps)
    nullable: bool = False  # None allowed (the model's default, or another field's value)
    # The adapter capability (pipedit.capabilities.Capabilities) a model needs to take a value.
    capability: str | None = None
    # Part of a render line's identity. `absent`: values that leave a line's key as it was before
    # the field existed, so that adding a field does not re-render every finished line.
    keyed: bool = True
    absent: tuple = (None,)
    api_name: str | None = None  # the API's create field, when it differs from `name`
    # `--<name>`: a config default's flag on every command that takes generation flags, else one
    # request's on `generate`. Off: the interface has its own form (--prompt, --image FILE).
    cli: bool = True
    in_config: bool = True  # a `generation` default in the config; else only per request
    in_request: bool = True  # VideoRequest carries it
    form: bool = True  # a user choice on the page
    label: str = ""  # the page's label
    canonical: Callable[[Any], Any] | None = None  # the stored form of a valid value (cache: "fbcache:0.1")
    nonempty: bool = False  # a string with more than blanks
    refusal: str = ""  # with `capability`: the refusal of a model without it ({family}: the model's)
    hint: str = ""  # said after what is allowed, in every refusal
    item: Any = None  # a list's entries, as the API's schema declares them
    api_form: Callable[[Any], Any] | None = None  # a canonical value as the API's JSON carries it
    # A value the scheduler reads: an attribute of pipedit.sampling.SamplingParams, which an
    # adapter's make_scheduler(sampling) gets (the video's size too: a shift that follows the
    # resolution, as LTX-2's dynamic shift, reads it).
    sampling: bool = False
    # A rule between this field and the request's others: rule(values, capabilities) -> the refusal,
    # or None when they go together. `values`: field name -> value; checked only when this field
    # is given (pipedit.adapter.check_inputs, after the capabilities).
    rule: Callable[[dict, Any], str | None] | None = None

    @property
    def request_default(self) -> Any:
        """The VideoRequest's default: None for a nullable field (the config's default or the
        model's own, decided where the request runs), else the config's; MISSING: required."""
        if self.nullable:
            return None
        return MISSING if self.default is None else self.default

    def to_api(self, value: Any) -> Any:
        return value if self.api_form is None or value is None else self.api_form(value)

    @property
    def api(self) -> str:
        return self.api_name or self.name

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any, *, called: str | None = None, limits: Any = None,
              error: type[UserInputError] = UserInputError) -> Any:
        """`value` in its canonical form, or `error` naming the field as `called` (the name it came
        by) and what is allowed. `limits`: a server's (its `limit` attribute bounds the value)."""
        name = called or self.name
        if value is None and self.nullable:
            return None
        if self.kind is bytes:
            if not isinstance(value, (bytes, bytearray)) or not value:
                raise error(f"{name} must be the non-empty bytes of a file{self.hint}")
            return value
        if self.kind is str:
            if not isinstance(value, str) or (self.nonempty and not value.strip()):
                raise error(f"{name} must be a {'non-empty ' if self.nonempty else ''}string{self.hint}, got {value!r}")
        elif self.kind is not list:  # a list's `canonical` checks it
            value = self._number(value, name, self.upper_bound(limits), error)
        if self.canonical is None:
            return value
        try:
            return self.canonical(value)
        except UserInputError as problem:
            raise error(str(problem)) from None

    def upper_bound(self, limits: Any = None) -> float | None:
        """The largest value allowed: `high`, or a server's `limit` (on `limits`) when lower."""
        bounds = [b for b in (self.high, getattr(limits, self.limit) if limits and self.limit else None)
                  if b is not None]
        return min(bounds) if bounds else None

    def _number(self, value, name: str, top: float | None, error):
        integer = self.kind is int
        if isinstance(value, bool) or not (isinstance(value, int) if integer else
                                           isinstance(value, (int, float)) and math.isfinite(value)):
            allowed = self._range(top)
            raise error(f"{name} must be {'an integer' if integer else 'a number'}"
                        f"{f' ({allowed})' if allowed else ''}{self.hint}, got {value!r}")
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        if below or (top is not None and value > top):
            raise error(f"{name} must be {self._range(top)}{self.hint}, got {value!r}")
        return value if integer else float(value)

    def _range(self, top: float | None) -> str:
        """Counts read "at least 1", real numbers ">= 0" (an open bound: "> 0")."""
        show = (lambda bound: f"{int(bound)}") if self.kind is int else (lambda bound: f"{bound:g}")
        low = None if self.low is None else show(self.low)
        if low is not None and self.low_open:
            return f"> {low}" + (f" and <= {show(top)}" if top is not None else "")
        if low is not None and top is not None:
            return f"between {low} and {show(top)}"
        if low is not None:
            return f"at least {low}" if self.kind is int else f">= {low}"
        if top is not None:
            return f"at most {show(top)}" if self.kind is int else f"<= {show(top)}"
        return ""


def _low_noise_guidance(values: dict, capabilities: Any) -> str | None:
    from .guidance import guidance_applies

    scale, scale_2 = values.get("guidance_scale"), values["guidance_scale_2"]
    if scale is not None and guidance_applies(scale) and scale_2 < 1:
        # One scale <= 1 means "no guidance" at every step; below 1 the low-noise steps would need
        # both branches combined with a weight under 1, which pipedit's per-step seam does not run.
        return (f"guidance_scale_2 {scale_2} is below 1 while guidance_scale is {scale}: use 1 (no guidance for the "
                f"low-noise expert) or a value above 1")
    return None


# Named in the refusal of an image by a model without image conditioning (each family declares the
# words naming what of it takes a capability: pipedit.families' `takes`).
IMAGE_MODELS = ", ".join(families.takers("image"))
_STEPS = "Denoising steps."
# The refusal of flow_shift by a model whose sampler has no shift ({family}: the model's).
FLOW_SHIFT_REFUSAL = ("flow_shift needs a scheduler with a flow-matching shift (the models that take it: "
                      + ", and ".join(families.takers("flow_shift")) + ", as their releases have); {family}: this "
                      "checkpoint's scheduler has none; leave it out")
# A shift near 0 maps every sigma to ~0 and a huge one every sigma to ~1: finite values that run and
# give a black video (1e-300, 1e308). Releases and distillations use shifts of about 1 to 20.
FLOW_SHIFT_RANGE = (0.01, 100.0)
FIELDS: dict[str, GenerationField] = {f.name: f for f in (
    GenerationField("prompt", str, None, "What the video shows.", in_config=False, cli=False, nonempty=True,
                    hint=": describe the video to generate", label="Prompt"),
    GenerationField("height", int, 128, "Video height in pixels (the API's size is WIDTHxHEIGHT).", low=1,
                    limit="max_side", api_name="size", label="Height", sampling=True),
    GenerationField("width", int, 128, "Video width in pixels (the API's size is WIDTHxHEIGHT).", low=1,
                    limit="max_side", api_name="size", label="Width", sampling=True),
    GenerationField("num_frames", int, 17, "Frame count (4k+1 for the causal video VAEs).", low=1,
                    limit="max_frames", hint=", and 4*k+1 (1, 5, 9, ...) for a causal video VAE", label="Frames",
                    sampling=True),
    GenerationField("steps", int, 10, _STEPS, low=1, limit="max_steps", api_name="num_inference_steps",
                    label="Steps", sampling=True),
    GenerationField("guidance_scale", float, 6.0, "Classifier-free / embedded guidance scale.", low=0,
                    limit="max_guidance_scale", label="Guidance"),
    GenerationField("guidance_scale_2", float, None, "Two-expert models (Wan2.2 A14B): the low-noise expert's "
                    "guidance scale; defaults to guidance_scale.", low=0, limit="max_guidance_scale",
                    nullable=True, capability="guidance_scale_2", label="Guidance, low-noise expert",
                    rule=_low_noise_guidance,
                    refusal="guidance_scale_2 applies to two-expert checkpoints only (Wan2.2 A14B: transformer_2 and "
                            "boundary_ratio); this {family} checkpoint has one transformer: leave it out"),
    GenerationField("flow_shift", float, None, "The flow-matching scheduler's shift (sigma -> shift*sigma / "
                    "(1 + (shift-1)*sigma)); left out: the checkpoint scheduler's own. Few-step distilled models "
                    "name the shift they were distilled with.", low=FLOW_SHIFT_RANGE[0], high=FLOW_SHIFT_RANGE[1],
                    nullable=True,
                    capability="flow_shift", label="Scheduler shift", refusal=FLOW_SHIFT_REFUSAL, sampling=True),
    GenerationField("seed", int, 0, "Seed of the initial noise.", low=0, high=2**63 - 1, label="Seed"),
    GenerationField("fps", int, 24, "Frames per second of the mp4 (a model with sound: also the sound's length "
                    "and the frame rate its positions are conditioned on).", low=1, limit="max_fps",
                    label="Frames per second"),
    GenerationField("cache", str, "none", "Step caching: none, fbcache:T (First-Block Cache) or teacache:T "
                    "(HunyuanVideo); T = 0 never skips (see docs/caching.md). Left out: generation.cache.",
                    nullable=True, absent=(None, "none"), canonical=_canonical_cache,
                    label="Step cache"),
    GenerationField("negative_prompt", str, None, "What to steer away from, for models with classifier-free "
                    "guidance (Wan, OpenSoraPlan); HunyuanVideo: must be empty.", nullable=True,
                    capability="negative_prompt", in_config=False, label="Negative prompt",
                    refusal="negative_prompt is not supported by {family} (it uses embedded guidance); leave it out, "
                            "or serve a model with classifier-free guidance (" + ", ".join(families.takers(
                                "negative_prompt")) + ")"),
    # Image-to-video: the conditioning image's encoded file bytes, checked by pipedit.images.load_image
    # where they enter pipedit (a file path on the CLI and in render lines, `input_reference` in the API).
    # Bytes, not pixels: small to send to a rank. Its render identity is its content (image_sha256).
    GenerationField("image", bytes, None, "The image the video starts from (image-to-video).", nullable=True,
                    capability="image", api_name="input_reference", in_config=False, keyed=False, cli=False,
                    hint=" (png, jpeg or webp)", label="Start image",
                    refusal="{family} with this checkpoint takes no image (it is text-to-video); image-to-video "
                            "needs " + IMAGE_MODELS),
    # The server's named LoRA adapters (model.offered_loras) a request runs with, in its canonical form
    # ((name, scale or None: the name's default), ...). Only a server knows which names it offers:
    # serve.contract.params and the render line check checks them (pipedit.lora.spec.request_loras).
    GenerationField("loras", list, None, "LoRA adapters this request runs with: [{\"name\": NAME, \"scale\": S}, "
                    "...], NAME one the server offers (GET /v1/pipedit/options), S its scale (left out: the "
                    "server's default for NAME). Left out: none.", nullable=True, absent=(None, ()),
                    in_config=False, cli=False, canonical=_canonical_loras, item=LoraChoice, api_form=_api_loras,
                    label="LoRA adapters"),
)}


def config_fields() -> list[GenerationField]:
    """The fields with a `generation` default in the config (and a flag overriding it)."""
    return [f for f in FIELDS.values() if f.in_config]


def request_fields() -> list[GenerationField]:
    return [f for f in FIELDS.values() if f.in_request]


def api_fields() -> list[GenerationField]:
    """The fields of the API's create schema under their own name (height and width come as
    `size`, the image as the `input_reference` upload)."""
    return [f for f in FIELDS.values() if f.api_name != "size" and f.kind is not bytes]


def sampling_fields() -> list[GenerationField]:
    """The fields a scheduler reads (pipedit.sampling.SamplingParams)."""
    return [f for f in FIELDS.values() if f.sampling]


def capability_fields() -> list[GenerationField]:
    """The fields a model takes only with their capability (pipedit.capabilities.Capabilities)."""
    return [f for f in FIELDS.values() if f.capability is not None]


def attributes(specs: list[GenerationField], default_of: Callable[[GenerationField], Any]) -> list[tuple]:
    """make_dataclass's (name, type, field) of each field, `default_of(spec)` its default (MISSING:
    required). The required ones come first, as a dataclass needs; the rest keep the table's order."""
    made = [(spec.name, spec.kind if not spec.nullable else Optional[spec.kind],
             field(default=default_of(spec), repr=spec.kind is not bytes)) for spec in specs]
    return sorted(made, key=lambda attribute: attribute[2].default is not MISSING)


def record_class(name: str, module: str, attributes: list[tuple], namespace: dict | None = None,
                 doc: str = "") -> type:
    """A frozen dataclass of `attributes`, named `module.name`: pickle finds it there (Ray sends
    requests and configs between processes), so `module` must bind it to `name`."""
    made = make_dataclass(name, attributes, namespace=dict(namespace or {}, __doc__=doc), frozen=True)
    made.__module__, made.__qualname__ = module, name
    return made


# Modules whose classes are built from FIELDS when they are imported: a field registered after
# one of them would be missing from its class.
BUILT_FROM_FIELDS = {"pipedit.request": "VideoRequest", "pipedit.config": "GenerationDefaults",
                     "pipedit.capabilities": "Capabilities", "pipedit.sampling": "SamplingParams"}
# Comma-separated modules, each declaring fields with `register`, imported with this module.
FIELD_MODULES_ENV = "PIPEDIT_FIELD_MODULES"


def register(spec: GenerationField) -> GenerationField:
    """Adds a field declared outside this module, from a module named in PIPEDIT_FIELD_MODULES
    (imported before any class is built from the table)."""
    if spec.name in FIELDS:
        raise ValueError(f"generation field {spec.name!r} is declared already")
    built = [f"{module}.{name}" for module, name in BUILT_FROM_FIELDS.items()
             if hasattr(sys.modules.get(module), name)]  # a module still importing this one has none yet
    if built:
        raise RuntimeError(f"generation field {spec.name!r} comes too late: {', '.join(built)} were built from the "
                           f"fields already; register it from a module named in {FIELD_MODULES_ENV}")
    FIELDS[spec.name] = spec
    return spec


def _import_field_modules() -> None:
    for module in os.environ.get(FIELD_MODULES_ENV, "").split(","):
        if module.strip():
            importlib.import_module(module.strip())


_import_field_modules()
