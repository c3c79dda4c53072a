"""Attention strategy registry: names map to import paths, imported on first use."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from pipedit.attention.base import AttentionStrategy
from pipedit.distributed.context import ParallelContext

# name -> "module:Class". Add new strategies (e.g. attention co-processing) here.
_STRATEGIES: dict[str, str] = {
    "local": "pipedit.attention.local:LocalAttention",
    "ulysses": "pipedit.attention.usp:UlyssesAttention",
    "ring": "pipedit.attention.usp:RingAttention",
    "usp": "pipedit.attention.usp:USPAttention",
    "aco": "pipedit.attention.aco:AcoAttention",
}


def available_strategies() -> tuple[str, ...]:
    return tuple(_STRATEGIES)


def strategy_class(name: str) -> type[AttentionStrategy]:
    if name not in _STRATEGIES:
        raise ValueError(
            f"unknown attention strategy {name!r}; valid names: {', '.join(_STRATEGIES)}"
        )
    module, _, attr = _STRATEGIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def get_attention_strategy(name: str, ctx: ParallelContext, **options: Any) -> AttentionStrategy:
    """Build strategy `name` for `ctx`; options are the strategy's keyword arguments
    (local: backend; ulysses/usp: chunk_heads, backend, num_heads; ring: backend, num_heads)."""
    cls = strategy_class(name)
    accepted = [
        p.name for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"attention strategy {name!r} got unknown options {unknown}; accepted: {accepted}"
        )
    return cls(ctx, **options)
