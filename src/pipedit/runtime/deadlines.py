"""How long the driver and the ranks wait, derived from the step times measured so far.

op_s: the per-operation deadline every rank applies to its collectives and P2P transfers,
max(floor, factor x the slowest denoise step), never above OP_SHARE_OF_GROUP_TIMEOUT of the process
group's timeout (NCCL's watchdog): a hang must surface as an OperationTimeout naming the operation,
not as a rank killed by the watchdog. call_s: how long the driver waits for one rank call (a
step, an Aco forward, a prompt's encode) before it declares the group hung: op_s plus a floor's
grace, so a rank's own, more precise OperationTimeout arrives first. With model.compile the first
forward of a new video shape compiles its graphs: while it runs, both grow by first_compile_s
(`compiling`); its time is not a step time. With weights offloaded to their files (Wan2.2 A14B's
idle expert), the first request's steps include the first swap, which may read the files from a
disk or a network folder: they are widened by first_swap_seconds (`first_swap`), and their times
are no step times either. An encode with an image
(image-to-video: the VAE encodes a video) waits as long as a decode of the same shape. decode_s(shape): the same for one
decode, from the slowest decode measured, and never below DECODE_PREDICTION_MARGIN x the
planner's prediction for that video shape on the decode rank's GPU (a first 720p decode on a
slow GPU takes minutes: it must not be declared hung before any decode has been measured).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ..adapter import VideoShape
from ..config import OP_SHARE_OF_GROUP_TIMEOUT, ReliabilityConfig

_RESEND_RATIO = 1.25  # ranks are told a new op deadline only when it grew by this much
# The planner's cost model is within ~2x of measured times where it was validated (docs/planner.md).
DECODE_PREDICTION_MARGIN = 3.0

DecodePrediction = Callable[[VideoShape], float]  # seconds for one decode of that shape
# The read rate assumed for offloaded weights' first swap: a network folder's or a SATA disk's
# sequential read (local NVMe reads ten times faster). The files are read ahead at load
# (pipedit.mapped_weights.read_ahead), so the swap usually finds them cached; this is the bound
# for when it does not.
FIRST_SWAP_READ_BYTES_PER_S = 200e6


def first_swap_seconds(file_bytes: int) -> float:
    """How much longer than a step the first swap of `file_bytes` of offloaded weights may take."""
    return file_bytes / FIRST_SWAP_READ_BYTES_PER_S


class Deadlines:
    def __init__(self, config: ReliabilityConfig, predict_decode: DecodePrediction | None = None):
        self.config = config
        self.predict_decode = predict_decode
        self.slowest_step_s = 0.0
        self.slowest_decode_s = 0.0
        self.sent_op_s: float | None = None  # the deadline the ranks hold
        # model.compile: the first forward of a new video shape compiles its graphs, each rank at
        # its own pace; while it runs every bound is widened by this much (see compiling()).
        self.compile_s = 0.0
        self.swap_s = 0.0  # the same for the steps of a group's first request (first_swap())
        self._predicted: dict[VideoShape, float] = {}

    def _bound(self, measured: float) -> float:
        return max(self.config.op_deadline_floor_s, self.config.op_deadline_factor * measured)

    @property
    def op_s(self) -> float:
        return min(self._bound(self.slowest_step_s) + self.compile_s + self.swap_s,
                   OP_SHARE_OF_GROUP_TIMEOUT * self.config.group_timeout_s)

    @property
    def call_s(self) -> float:
        # The driver's wait is not capped by the group timeout: a rank compiling alone (one rank,
        # or before its first collective) is not hung.
        return self.op_s + self.config.op_deadline_floor_s + self.compile_s + self.swap_s

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Bounds for the first forward of a new video shape under model.compile: op_s (the
        ranks', capped below the group timeout) and call_s (the driver's) grow by first_compile_s."""
        self.compile_s = self.config.first_compile_s
        try:
            yield
        finally:
            self.compile_s = 0.0

    @contextlib.contextmanager
    def first_swap(self, seconds: float) -> Iterator[None]:
        """Bounds for the steps that may hold the first swap of offloaded weights: op_s (capped
        below the group timeout: every rank swaps at the same step, so peers wait for each other
        only by the difference of their reads) and call_s (the driver's, uncapped) grow by
        `seconds` (first_swap_seconds of the files' bytes)."""
        self.swap_s = seconds
        try:
            yield
        finally:
            self.swap_s = 0.0

    def decode_s(self, shape: VideoShape | None = None) -> float:
        """The bound for one decode of `shape` (None: of any shape measured so far)."""
        predicted = 0.0
        if shape is not None and self.predict_decode is not None:
            if shape not in self._predicted:
                self._predicted[shape] = self.predict_decode(shape)
            predicted = DECODE_PREDICTION_MARGIN * self._predicted[shape]
        return max(self._bound(self.slowest_decode_s), predicted) + self.config.op_deadline_floor_s

    def encode_s(self, shape: VideoShape, with_image: bool) -> float:
        """The bound for one prompt encode. With an image the VAE's encoder runs over a video of
        the request's shape (Wan2.1 I2V: the image, then zero frames), on the text rank's GPU
        beside a decode that may be running: as long as a decode, so the decode bound holds."""
        return max(self.call_s, self.decode_s(shape)) if with_image else self.call_s

    def observe_step(self, seconds: float) -> bool:
        """Records a step's duration; True when the ranks should be sent the new op_s."""
        self.slowest_step_s = max(self.slowest_step_s, seconds)
        return self.sent_op_s is None or self.op_s > self.sent_op_s * _RESEND_RATIO

    def observe_decode(self, seconds: float) -> None:
        self.slowest_decode_s = max(self.slowest_decode_s, seconds)
