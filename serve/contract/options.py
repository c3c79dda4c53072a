"""What a create request may ask for on this server (GET /v1/pipedit/options; the page builds
its form from it): the model, its defaults, the allowed values and the inputs it takes."""

from __future__ import annotations

from pipedit.capabilities import Capabilities
from pipedit.config import GenerationDefaults
from pipedit.fields import FIELDS, GenerationField, capability_fields
from pipedit.images import IMAGE_FORMATS
from pipedit.lora.spec import NO_LORAS, LoraOffer

from .params import ServiceLimits

_TYPES = {int: "integer", float: "number", str: "string", bytes: "file", list: "array"}


def create_options(model_name: str, model, defaults: GenerationDefaults, limits: ServiceLimits,
                   loras: LoraOffer = NO_LORAS) -> dict:
    """`model`: the served adapter built from its configs (None: nothing model-specific known);
    `loras`: the adapters requests may choose by name."""
    capabilities = getattr(model, "capabilities", Capabilities())
    offered = [spec for spec in FIELDS.values()
               if spec.form and (spec.capability is None or getattr(capabilities, spec.capability))
               and (spec.name != "loras" or loras.named)]
    return {
        "model": model_name,
        # What a request that leaves a field out runs with (the fields that always have a value).
        "defaults": {spec.api if spec.api_name != "size" else spec.name: getattr(defaults, spec.name)
                     for spec in FIELDS.values() if spec.in_config and not spec.nullable},
        # The page's form: every generation field this model takes, its bounds on this server.
        "fields": [_describe(spec, defaults, limits) for spec in offered],
        "size_multiple": int(getattr(model, "size_multiple", 1)),
        "max_side": limits.max_side,
        "frame_counts": list(range(1, limits.max_frames + 1, int(getattr(model, "temporal_ratio", 1)))),
        "max_frames": limits.max_frames,
        "max_steps": limits.max_steps,
        "max_cost": limits.max_cost,
        "max_fps": limits.max_fps,
        "max_guidance_scale": limits.max_guidance_scale,
        "max_prompt_chars": limits.max_prompt_chars,
        # What a request may carry besides its prompt (the page shows the fields for these).
        # (takes_<capability>: whether the model takes the fields that need it.)
        **{f"takes_{name}": getattr(capabilities, name)
           for name in dict.fromkeys(spec.capability for spec in capability_fields())},
        "needs_image": capabilities.needs_image,
        # The model makes sound: its videos carry an AAC track (the page plays it, with a mute button).
        "has_sound": capabilities.has_sound,
        # The adapters a request may name in `loras`, each with the scale it runs at when left out.
        "loras": [{"name": name, "scale": spec.scale} for name, spec in loras.named],
        "max_loras": loras.most,
        "image_formats": list(IMAGE_FORMATS.values()),
        "max_image_pixels": limits.max_image_pixels,
        "max_upload_bytes": limits.max_upload_bytes,
    }


def _describe(spec: GenerationField, defaults: GenerationDefaults, limits: ServiceLimits) -> dict:
    """`name`: the field's; `param`: what the API calls it (height and width come as `size`)."""
    return {"name": spec.name, "param": spec.api, "type": _TYPES[spec.kind], "label": spec.label,
            "description": spec.description, "default": getattr(defaults, spec.name) if spec.in_config else None,
            "nullable": spec.nullable, "minimum": spec.low, "maximum": spec.upper_bound(limits)}
