"""A generation field declared outside pipedit, once: loaded by naming this module in
PIPEDIT_FIELD_MODULES (tests/test_fields.py runs check_fake_field.py so)."""

from pipedit.fields import GenerationField, register


def _needs_two_steps(values: dict, capabilities) -> str | None:
    steps = values.get("steps")
    if values["sharpness"] > 0 and steps is not None and steps < 2:
        return f"sharpness {values['sharpness']} needs at least 2 steps, got {steps}"
    return None


register(GenerationField(
    "sharpness", float, None, "How crisp the frames come out; left out: the model's own.", low=0, high=1,
    nullable=True, capability="sharpness", sampling=True, rule=_needs_two_steps, label="Sharpness",
    refusal="sharpness is not taken by {family}: leave it out"))
