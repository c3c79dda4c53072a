"""RankState: what one rank knows about itself at run time, passed explicitly.

Its worker makes one per rank and hands it to everything that posts a collective or P2P
transfer (through ParallelContext.state, DecodeGroup.state or as an argument): the fault points
of PIPEDIT_FAULTS (pipedit.faults) and the operation deadline with the device-side ops it still
has to check (deadline.py). Nothing of it lives in a module, so ranks run one after another in
one process (the dry run, tests) or side by side never see each other's faults or deadlines.
Collectives given no state run without fault points and without a deadline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..faults import FaultPoints
from .deadline import OpDeadline


@dataclass(frozen=True)
class RankState:
    faults: FaultPoints = field(default_factory=FaultPoints)
    deadline: OpDeadline = field(default_factory=OpDeadline)

    @classmethod
    def for_rank(cls, rank: int, op_deadline_s: float | None = None,
                 environment: Mapping[str, str] = os.environ) -> RankState:
        """Global rank `rank`'s state: the fault switch from `environment` (the process's, as the
        executor sets it for its ranks) and the operation deadline (None: none)."""
        return cls(FaultPoints.from_environment(rank, environment), OpDeadline(op_deadline_s))
