"""Failures of the rank group itself (a rank died, hung, ran out of memory or raised), as opposed
to a request's own bad input. After one the group's state is unknown (a peer may be stuck in a
collective), so the engine tears the group down and rebuilds it."""


class RankGroupError(RuntimeError):
    def __init__(self, message: str, rank: int | None = None):
        super().__init__(message)
        self.rank = rank
