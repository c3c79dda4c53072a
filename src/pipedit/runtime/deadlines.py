"""How long the driver and the ranks wait, derived from the step times measured so far.

op_s: the per-operation deadline every rank applies to its collectives and P2P transfers,
max(floor, factor x the slowest denoise step). call_s: how long the driver waits for one rank
call (a step, an Aco forward, an encode) before it declares the group hung: op_s plus a floor's
grace, so a rank's own, more precise OperationTimeout arrives first. decode_s: the same for one
decode, from the slowest decode measured.
"""

from __future__ import annotations

from ..config import ReliabilityConfig

_RESEND_RATIO = 1.25  # ranks are told a new op deadline only when it grew by this much


class Deadlines:
    def __init__(self, config: ReliabilityConfig):
        self.config = config
        self.slowest_step_s = 0.0
        self.slowest_decode_s = 0.0
        self.sent_op_s: float | None = None  # the deadline the ranks hold

    def _bound(self, measured: float) -> float:
        return max(self.config.op_deadline_floor_s, self.config.op_deadline_factor * measured)

    @property
    def op_s(self) -> float:
        return self._bound(self.slowest_step_s)

    @property
    def call_s(self) -> float:
        return self.op_s + self.config.op_deadline_floor_s

    @property
    def decode_s(self) -> float:
        return self._bound(self.slowest_decode_s) + self.config.op_deadline_floor_s

    def observe_step(self, seconds: float) -> bool:
        """Records a step's duration; True when the ranks should be sent the new op_s."""
        self.slowest_step_s = max(self.slowest_step_s, seconds)
        return self.sent_op_s is None or self.op_s > self.sent_op_s * _RESEND_RATIO

    def observe_decode(self, seconds: float) -> None:
        self.slowest_decode_s = max(self.slowest_decode_s, seconds)
