"""The cache setting: `none`, `fbcache:T` or `teacache:T`, parsed into a frozen CacheSpec."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UserInputError

KINDS = ("none", "fbcache", "teacache")
FORMS = "none, fbcache:T or teacache:T with T a number >= 0 (e.g. fbcache:0.1, teacache:0.15)"


@dataclass(frozen=True)
class CacheSpec:
    """kind none: every step computes every block. fbcache:T skips the blocks after the first when
    the first block's residual moved by less than T (relative L1) since the last computed step;
    teacache:T skips every block while the rescaled change of the modulated input, accumulated
    since the last computed step, stays below T. T = 0 never skips."""

    kind: str = "none"
    threshold: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise UserInputError(f"cache must be one of {FORMS}; got kind {self.kind!r}")
        value = self.threshold
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UserInputError(f"cache threshold must be a finite number >= 0 ({FORMS}), got {value!r}")
        if self.kind == "none" and value:
            raise UserInputError(f"cache none takes no threshold ({FORMS})")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}:{self.threshold:g}"


def parse_cache(text, error: type[UserInputError] = UserInputError) -> CacheSpec:
    """'none', 'fbcache:T', 'teacache:T' (or a CacheSpec) -> CacheSpec; `error` (a UserInputError
    class, e.g. InvalidRequestError for a request's field) names the allowed forms."""
    if isinstance(text, CacheSpec):
        return text
    if not isinstance(text, str):
        raise error(f"cache must be a string, one of {FORMS}; got {text!r}")
    kind, sep, threshold = text.strip().lower().partition(":")
    if kind == "none" and not sep:
        return CacheSpec()
    if kind not in KINDS[1:] or not sep:
        raise error(f"cache must be one of {FORMS}; got {text!r}")
    try:
        return CacheSpec(kind, float(threshold))
    except (ValueError, UserInputError):
        raise error(f"cache must be one of {FORMS}; got {text!r}") from None


def resolve(request_cache: str | None, default: str | CacheSpec) -> CacheSpec:
    """A request's own cache, else the engine's default (generation.cache)."""
    return parse_cache(default if request_cache is None else request_cache)
