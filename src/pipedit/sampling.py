"""What a request asks of the sampler: the values an adapter's make_scheduler(sampling) reads, and
the one way a checkpoint's scheduler is rebuilt with a request's shift.

Every scheduler is built through that seam, so a sampling parameter (a field of pipedit.fields
marked `sampling`: steps, flow_shift, ...) reaches all models at once (each adapter decides how
its scheduler honours it)."""

from __future__ import annotations

from typing import Any

from .fields import attributes, record_class, sampling_fields


def _of(cls, request):
    """The sampling parameters a VideoRequest carries (the one place they are read from it)."""
    return cls(**{spec.name: getattr(request, spec.name) for spec in sampling_fields()})


# One attribute per sampling field, its default the request's (flow_shift None: the checkpoint's own).
SamplingParams = record_class(
    "SamplingParams", __name__, attributes(sampling_fields(), lambda spec: spec.request_default),
    namespace={"of": classmethod(_of)},
    doc="The request's values a scheduler reads (steps: num_inference_steps; flow_shift: the scheduler's "
        "shift, None: the checkpoint's own).")


def shift_parameter(config: Any) -> str | None:
    """The config key of a scheduler's flow-matching shift, as its diffusers class reads it when
    setting timesteps: `flow_shift` (UniPC and DPM-Solver multistep with use_flow_sigmas), `shift`
    (FlowMatchEulerDiscreteScheduler); None: the scheduler has no fixed shift a request could set
    (no such key, flow sigmas off, or use_dynamic_shifting: a shift computed per resolution)."""
    if config.get("use_dynamic_shifting", False):
        return None
    if "flow_shift" in config:
        return "flow_shift" if config.get("use_flow_sigmas", False) else None
    return "shift" if "shift" in config else None


def scheduler_for(template: Any, sampling: SamplingParams) -> Any:
    """A new scheduler of the checkpoint's class and config (`template`: the loaded one), with the
    request's shift when it sets one, as `type(template).from_config(config, flow_shift=X)` (or
    `shift=X`) builds it. Timesteps are the adapter's to set. A shift the scheduler cannot take is
    refused before this (check_inputs and the adapter's flow_shift capability)."""
    config = template.config
    if sampling.flow_shift is None:
        return type(template).from_config(config)
    key = shift_parameter(config)
    if key is None:
        raise ValueError(f"{type(template).__name__} has no flow-matching shift to set")
    return type(template).from_config(config, **{key: sampling.flow_shift})
