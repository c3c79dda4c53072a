"""What a create request may ask for on this server (GET /v1/pipedit/options; the page builds
its form from it): the model, its defaults, the allowed values and the inputs it takes."""

from __future__ import annotations

from pipedit.config import GenerationDefaults
from pipedit.images import IMAGE_FORMATS

from .params import ServiceLimits


def create_options(model_name: str, model, defaults: GenerationDefaults, limits: ServiceLimits) -> dict:
    """`model`: the served adapter built from its configs (None: nothing model-specific known)."""
    d = defaults
    return {
        "model": model_name,
        "defaults": {"width": d.width, "height": d.height, "num_frames": d.num_frames, "fps": d.fps,
                     "num_inference_steps": d.steps, "guidance_scale": d.guidance_scale, "seed": d.seed},
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
        "takes_negative_prompt": bool(getattr(model, "takes_negative_prompt", False)),
        "takes_image": bool(getattr(model, "takes_image", False)),
        "needs_image": bool(getattr(model, "needs_image", False)),
        "takes_guidance_scale_2": bool(getattr(model, "takes_guidance_scale_2", False)),
        "image_formats": list(IMAGE_FORMATS.values()),
        "max_image_pixels": limits.max_image_pixels,
        "max_upload_bytes": limits.max_upload_bytes,
    }
