"""Failures of the rank group itself (a rank died, hung, ran out of memory or raised), as opposed
to a request's own bad input. After one the group's state is unknown (a peer may be stuck in a
collective), so the engine tears the group down and rebuilds it, unless `rebuild` is False: a
decode rank that raised outside any communication (e.g. out of memory in the VAE) is intact."""


class RankGroupError(RuntimeError):
    def __init__(self, message: str, rank: int | None = None, rebuild: bool = True):
        super().__init__(message)
        self.rank = rank
        self.rebuild = rebuild
