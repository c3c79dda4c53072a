"""Failures of the rank group itself (a rank died, hung, ran out of memory or raised), as opposed
to a request's own bad input. After one the group's state is unknown (a peer may be stuck in a
collective), so the engine tears the group down and rebuilds it, unless `rebuild` is False: a
decode rank that raised outside any communication (e.g. out of memory in the VAE) is intact, and
so is the text rank whose prompt encoding raised a request error (one rank call, no collective)."""

import torch

from ..distributed.deadline import CommunicationError
from ..errors import UserInputError

# Errors a request raises every time it runs (its input is bad), wherever they were raised.
REQUEST_ERRORS = (UserInputError, UnicodeError)


class RankGroupError(RuntimeError):
    def __init__(self, message: str, rank: int | None = None, rebuild: bool = True):
        super().__init__(message)
        self.rank = rank
        self.rebuild = rebuild


class PlacementAwaitsNode(RuntimeError):
    """A Serve replica's placement group lost a node (Ray's state RESCHEDULING): no rank can start in
    it until Ray places the lost bundles again, when a node with room joins."""


def is_request_error(error: BaseException | None) -> bool:
    """Whether `error` (or what caused it, e.g. a rank's exception inside a RankGroupError) says
    the request itself is bad, so running it again fails again."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, REQUEST_ERRORS):
            return True
        error, seen = error.__cause__, seen + 1
    return False


def leaves_group_intact(method: str, cause: BaseException) -> bool:
    """Whether a rank call that raised `cause` leaves its rank and every peer usable: a decode
    (of frames or of sound) that failed outside any transfer and not with a CUDA error, or a
    prompt encoding that failed with a request error. Hazard: a CUDA error other than out-of-memory (an illegal address, a
    device-side assert) is sticky: every later kernel on that device fails, so the rank must be
    replaced."""
    if method == "encode_prompt":
        return is_request_error(cause)
    decode = method in ("decode", "decode_sound")
    return decode and not isinstance(cause, CommunicationError) and not _cuda_fault(cause)


def _cuda_fault(cause: BaseException) -> bool:
    if isinstance(cause, torch.cuda.OutOfMemoryError):
        return False
    accelerator_error = getattr(torch, "AcceleratorError", None)  # torch >= 2.8 raises it for CUDA errors
    return (accelerator_error is not None and isinstance(cause, accelerator_error)) or "CUDA error" in str(cause)
