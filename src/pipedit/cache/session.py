"""A denoise worker's step cache: the hook is installed on the transformer at the first request
that asks for a cache and stays inert (the uncached model) for requests that do not."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from ..distributed.rank_state import RankState
from ..errors import InvalidRequestError
from .agree import Agreement
from .hook import StepCache
from .policy import make_policy
from .spec import CacheSpec, resolve
from .state import CacheState


class WorkerCache:
    """groups: the process groups the decision is agreed over (the SP group, then the CFG
    peers); on_skip: called on every rank when a forward skips its tail (Aco's end marker);
    state: the rank's RankState, for the agreement's all-reduces."""

    def __init__(self, adapter, groups: Sequence = (), on_skip: Callable[[], None] | None = None,
                 state: RankState | None = None):
        self.adapter = adapter
        self.agreement = Agreement(groups, state)
        self.on_skip = on_skip
        self.hook: StepCache | None = None

    def new_state(self, request_cache: str | None, default: str | CacheSpec, total_steps: int) -> CacheState | None:
        """The request's own cache state (None: uncached); InvalidRequestError for a cache this
        model cannot run."""
        spec = resolve(request_cache, default)
        if not spec.enabled:
            return None
        family = getattr(self.adapter, "family", type(self.adapter).__name__)
        blocks = self.adapter.cache_blocks() if self.hook is None else self.hook.blocks
        if blocks is None:  # the model has no step cache (AdapterHooks' default)
            raise InvalidRequestError(f"{family} does not support step caching; use cache none")
        policy = make_policy(spec, family)
        if self.hook is None:
            self.hook = StepCache(blocks, self.agreement, self.on_skip)
        if policy.signal == "modulated_input" and self.hook.blocks.modulated_input is None:
            raise InvalidRequestError(f"{family} exposes no TeaCache signal; use fbcache:T or cache none")
        return CacheState(spec, policy, total_steps)

    def running(self, state: CacheState | None):
        """Around one denoising step: its forward uses `state` (None: the uncached model)."""
        if self.hook is None:
            return contextlib.nullcontext()
        return self.hook.running(state)
