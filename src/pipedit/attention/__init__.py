"""Attention strategies (local, ulysses + PipeSP, ring, usp) behind one string-keyed registry."""

from pipedit.attention.base import AttentionStrategy
from pipedit.attention.registry import available_strategies, get_attention_strategy

__all__ = ["AttentionStrategy", "available_strategies", "get_attention_strategy"]
