"""A multipart create's `loras`. Form fields are flat strings, so the list comes one of two ways:
- one field `loras` holding the JSON list (`[{"name": "a", "scale": 0.8}]`), what curl users write;
- the bracket fields the official openai SDK makes of `extra_body={"loras": [...]}` in a
  multipart create: `loras[][name]` per adapter and `loras[][scale]` per given scale.
Multipart keeps each key's values in order but not the order between keys, so the bracket form
pairs the n-th name with the n-th scale: every adapter gives a scale, or none does."""

from __future__ import annotations

import json

from ..contract.errors import invalid

PARAM = "loras"
NAME, SCALE = f"{PARAM}[][name]", f"{PARAM}[][scale]"
FORM_KEYS = (PARAM, NAME, SCALE)


def from_form(form) -> list | None:
    """`form`: starlette's FormData. The list of {"name", "scale"} entries (values as sent, the
    schema coerces them), or None when the form has no adapters; 400 when they can't be read."""
    text, names, scales = (form.getlist(key) for key in FORM_KEYS)
    if text and (names or scales) or len(text) > 1:
        raise invalid(f"send {PARAM} once: one JSON field {PARAM}, or the fields {NAME} and {SCALE}", PARAM)
    if text:
        try:
            return json.loads(text[0])
        except json.JSONDecodeError as error:
            raise invalid(f"{PARAM} must be a JSON list such as [{{\"name\": \"a\", \"scale\": 0.8}}] "
                          f"({error.msg} at column {error.colno})", PARAM) from None
    if not names and not scales:
        return None
    if scales and len(scales) != len(names):
        raise invalid(f"{len(names)} {NAME} fields but {len(scales)} {SCALE}: give every adapter a scale or none "
                      f"(multipart keeps no order between fields), or send {PARAM} as one JSON field", PARAM)
    return [dict(name=name, **({"scale": scales[i]} if scales else {})) for i, name in enumerate(names)]
