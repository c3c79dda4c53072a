"""What a model takes besides a prompt and a shape, and which parallel paths it runs: declared by
each adapter (a class attribute for the family, replaced per checkpoint where the checkpoint
decides, e.g. a Wan image-to-video pipeline), read by the engine, check_inputs and the options
route instead of probing the adapter for attributes.

One attribute per `capability` a generation field names (pipedit.fields: negative_prompt, image,
guidance_scale_2, flow_shift, ...; True: the model takes that field), then the ones no field
names, declared here."""

from __future__ import annotations

from dataclasses import field

from .fields import capability_fields, record_class

_BESIDES_FIELDS = [
    ("needs_image", bool, field(default=False)),  # image-to-video only: a request without an image is refused
    # Ring attention (a head's sequence split over ranks); sparse layers that attend over a head's
    # whole sequence on one rank (OpenSoraPlan's Skiparse) cannot.
    ("ring", bool, field(default=True)),
    # Classifier-free guidance as separate conditional and unconditional passes (the adapter's
    # cfg_branches and predict_branches, pipedit.guidance.GuidedPrediction): what CFG parallel runs.
    ("cfg_parallel", bool, field(default=False)),
    # The model makes sound (its adapter's decode_sound returns a pipedit.sound.Soundtrack): every
    # output carries an AAC track, a second free decode rank decodes it beside the video, and the
    # prompt's condition gets the video's shape and fps (the sound's length follows them).
    ("has_sound", bool, field(default=False)),
]

Capabilities = record_class(
    "Capabilities", __name__,
    [*((name, bool, field(default=False)) for name in dict.fromkeys(f.capability for f in capability_fields())),
     *_BESIDES_FIELDS],
    doc="What a model takes and runs (False: a field with that capability is refused with its refusal).")
