"""When to compute: First-Block Cache and TeaCache decisions, on host floats.

Both read a relative L1 distance |a - b|_1 / |b|_1 between this step's signal and a reference.
The caller hands the two sums, already summed over every denoise rank (agree.py), so every
rank takes the same decision from the same numbers."""

from __future__ import annotations

from .. import families
from ..errors import InvalidRequestError
from .spec import CacheSpec

def teacache_coefficients(family: str) -> tuple[float, ...]:
    """TeaCache's published rescale polynomial for `family` (its pipedit.families entry's
    `teacache`, with the set's source)."""
    entry = families.find(family)
    found = entry.teacache if entry is not None else None
    if found is None:
        raise InvalidRequestError(
            f"teacache has no published rescale coefficients for {family}; families that have them: "
            f"{', '.join(families.teacache_families())}. Use fbcache:T (any model) or cache none"
        )
    return found


def polynomial(coefficients: tuple[float, ...], x: float) -> float:
    """numpy.poly1d(coefficients)(x) by Horner's rule."""
    value = 0.0
    for c in coefficients:
        value = value * x + c
    return value


def relative_l1(sums: list[float]) -> float:
    """sum|a - b| / sum|b| (equal to the ratio of the means: both sums count the same elements);
    a zero reference is infinitely far (compute)."""
    numerator, denominator = sums
    return numerator / denominator if denominator > 0 else float("inf")


class FirstBlockPolicy:
    """diffusers' FirstBlockCacheConfig(threshold=T): the reference is block 0's residual of the
    last fully computed step (not moved on skipped steps); the first step computes. Skips when the
    distance is < T (diffusers: <= T; they differ only at exact equality, and T = 0 then never
    skips here, so threshold 0 equals the uncached run bit for bit)."""

    signal = "residual"  # block 0's output minus its input, video stream
    measures_every_step = False  # the reference only moves on computed steps

    def __init__(self, spec: CacheSpec):
        self.threshold = spec.threshold

    def needs_distance(self, step: int, total: int) -> bool:
        """Whether this step's decision reads a distance (given a reference exists)."""
        return True

    def decide(self, distance: float | None, step: int, total: int) -> bool:
        return distance is None or not distance < self.threshold


class TeaCachePolicy:
    """TeaCache: the reference is the previous step's modulated input (moved every step); the
    rescaled distance accumulates and the step computes once the sum reaches T (then it resets).
    The first and the last step always compute."""

    signal = "modulated_input"
    measures_every_step = True

    def __init__(self, spec: CacheSpec, coefficients: tuple[float, ...]):
        self.threshold = spec.threshold
        self.coefficients = coefficients
        self.accumulated = 0.0

    def needs_distance(self, step: int, total: int) -> bool:
        return 0 < step < total - 1

    def decide(self, distance: float | None, step: int, total: int) -> bool:
        if distance is None:
            self.accumulated = 0.0
            return True
        self.accumulated += polynomial(self.coefficients, distance)
        if self.accumulated < self.threshold:
            return False
        self.accumulated = 0.0
        return True


def make_policy(spec: CacheSpec, family: str):
    if spec.kind == "fbcache":
        return FirstBlockPolicy(spec)
    if spec.kind == "teacache":
        return TeaCachePolicy(spec, teacache_coefficients(family))
    raise ValueError(f"no policy for cache {spec}")
