"""Plain dataclasses that travel between engine, scheduler and workers."""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field

import torch

from .adapter import VideoShape
from .errors import InvalidRequestError
from .fields import attributes, record_class, request_fields
from .sound import Soundtrack


def _check_fields(self) -> None:
    for spec in request_fields():
        value = spec.check(getattr(self, spec.name), error=InvalidRequestError)
        object.__setattr__(self, spec.name, value)


def _field_values(self) -> dict:
    """The generation fields this request carries (pipedit.fields), by name."""
    return {spec.name: getattr(self, spec.name) for spec in request_fields()}


def _shape(self) -> VideoShape:
    return VideoShape(self.height, self.width, self.num_frames, self.fps)


def _generator(self) -> torch.Generator:
    # Same convention as diffusers: a CPU generator seeded with the request's seed.
    return torch.Generator("cpu").manual_seed(self.seed)


# One video to generate: an attribute per request field of pipedit.fields (its default the
# field's request_default: a nullable one's None is the config's default or the model's own), and
# its request_id. `loras`: the server's named adapters (model.offered_loras) it runs with, ((name, scale
# or None: the name's default), ...), given as [{"name": NAME, "scale": S}, ...] too; the ranks
# check the names against the offered ones again (pipedit.lora.switch).
VideoRequest = record_class(
    "VideoRequest", __name__,
    [*attributes(request_fields(), lambda spec: spec.request_default),
     ("request_id", str, field(default_factory=lambda: uuid.uuid4().hex[:12]))],
    namespace={"__post_init__": _check_fields, "field_values": _field_values, "shape": property(_shape),
               "generator": _generator},
    doc="One video to generate. Its generation fields are declared in pipedit.fields (defaults, bounds, "
        "meaning); each is checked there at construction, as every interface checks it.")


class RequestStatus(str, enum.Enum):
    QUEUED = "queued"
    ENCODING = "encoding"
    DENOISING = "denoising"
    DECODING = "decoding"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (RequestStatus.DONE, RequestStatus.FAILED, RequestStatus.CANCELLED)


class RequestCancelled(Exception):
    """The request was cancelled (between denoising steps, in the queue, or while decoding)."""


@dataclass
class VideoResult:
    """Between processes (a rank actor's result through Ray) the frames travel as 8-bit levels,
    what the mp4 keeps anyway: a quarter of float32's bytes (1.4 GB of float32 for one
    720x1280x129 video). The receiver gets floats on the 1/255 grid, so its mp4 is the same and
    its frames are within half a level (0.5/255) of the sender's."""

    request_id: str
    frames: torch.Tensor  # [F, H, W, 3] float in [0, 1]
    latents: torch.Tensor  # [1, C, T, h, w] final denoised latents, float32
    timings: dict[str, float] = field(default_factory=dict)
    sound: Soundtrack | None = None  # a model that makes sound (capabilities.has_sound): its track

    def __reduce__(self):
        levels = (self.frames.detach().float().clamp(0, 1) * 255).round().to(torch.uint8)
        return _result_from_levels, (self.request_id, levels, self.latents, self.timings, self.sound)


def _result_from_levels(request_id: str, levels: torch.Tensor, latents: torch.Tensor, timings: dict,
                        sound: Soundtrack | None = None) -> VideoResult:
    return VideoResult(request_id, levels.float() / 255, latents, timings, sound)


@dataclass
class RequestFailure:
    """A request that failed; the requests after it go on."""

    request_id: str
    phase: str  # encode, denoise or decode
    error: BaseException

    @property
    def cancelled(self) -> bool:
        return isinstance(self.error, RequestCancelled)

    @property
    def message(self) -> str:
        if self.cancelled:
            return f"request {self.request_id} was cancelled while {self.phase}"
        return f"request {self.request_id} failed while {self.phase}: {str(self.error) or type(self.error).__name__}"

    @property
    def code(self) -> str:
        """The error's own `code` (e.g. non_finite_latents; also when it caused the one reported,
        as after retries), else `<phase>_failed`."""
        error, seen = self.error, 0
        while error is not None and seen < 8:
            if isinstance(error, InvalidRequestError) and isinstance(getattr(error, "code", None), str):
                return error.code
            error, seen = error.__cause__, seen + 1
        return f"{self.phase}_failed"


@dataclass(frozen=True)
class RequestEvent:
    """Progress of one request, streamed to whoever listens (CLI progress bar, HTTP clients)."""

    request_id: str
    status: RequestStatus
    step: int = 0
    total_steps: int = 0
    at: float = field(default_factory=time.time)  # wall-clock seconds when it happened
