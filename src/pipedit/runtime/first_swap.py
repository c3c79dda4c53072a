"""The first swap of offloaded weights in a rank group (Wan2.2 A14B's idle expert), and the
deadlines of the request that holds it.

Offloaded weights wait in their memory-mapped checkpoint files; the first swap of a new rank
group may read them from the disk or a network folder, inside an ordinary denoise step. The
files are read ahead at load, so it usually finds them cached; the first request's steps still
get every rank's operation deadline and the driver's call bound widened by the files' read time
(pipedit.runtime.deadlines.first_swap_seconds), and their times are not taken for step times.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .deadlines import Deadlines, first_swap_seconds


class FirstSwap:
    def __init__(self) -> None:
        # The files' bytes rank 0's first swap reads: None until asked (once per rank group), 0
        # when nothing is offloaded or the group has swapped.
        self.pending_bytes: int | None = None

    def new_group(self) -> None:
        """A rebuilt rank group has swapped nothing yet."""
        self.pending_bytes = None

    @contextlib.contextmanager
    def around_steps(self, executor, deadlines: Deadlines) -> Iterator[bool]:
        """Around a request's steps: True (widened; no step times) until the group has swapped.
        A failure inside leaves the group to be rebuilt, or the next request widened again."""
        if self.pending_bytes is None:
            self.pending_bytes = int(executor.call_rank(0, "first_swap_bytes", timeout=deadlines.call_s) or 0)
        if not self.pending_bytes:
            yield False
            return
        with deadlines.first_swap(first_swap_seconds(self.pending_bytes)):
            executor.call_all("set_op_deadline", deadlines.op_s, timeout=deadlines.call_s)
            yield True
        self.pending_bytes = 0
        executor.call_all("set_op_deadline", deadlines.op_s, timeout=deadlines.call_s)
        deadlines.sent_op_s = deadlines.op_s
