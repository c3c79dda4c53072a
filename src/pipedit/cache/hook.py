"""The step cache on a transformer, installed from outside: block forwards are wrapped as
instance attributes (as diffusers' hooks do), so module names and state_dicts stay unchanged.

While no request's state is running (`running`), every wrapper calls the original forward with
the same arguments: results equal the uncached model bit for bit.

Invariant: a skip is decided at block 0 (FBCache after it, TeaCache before it) and holds for
the whole tail of that forward on every rank. The tail's attention calls are then not made: any
party serving them (Aco helpers) is told through `on_skip` before the first call it would miss.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch

from .blocks import CacheBlocks, Streams
from .policy import relative_l1
from .state import CacheState


class StepCache:
    def __init__(self, blocks: CacheBlocks, agree: Callable[[torch.Tensor], list[float]],
                 on_skip: Callable[[], None] | None = None):
        if len(blocks.blocks) < 2:
            raise ValueError("the step cache needs at least two transformer blocks (a head and a tail)")
        self.blocks = blocks
        self.agree = agree
        self.on_skip = on_skip
        self.state: CacheState | None = None
        # What each block's forward was (an instance attribute, e.g. a compiled forward, or None).
        self._originals = [block.__dict__.get("forward") for block in blocks.blocks]
        head, *tail = blocks.blocks
        self.head = head
        self._wrap(head, self._head)
        for index, block in enumerate(tail):
            self._wrap(block, functools.partial(self._tail, last=index == len(tail) - 1))

    @staticmethod
    def _wrap(block: torch.nn.Module, wrapper) -> None:
        # The forward in place now: the class's, or an instance one such as a compiled forward
        # (compile goes first, so that these wrappers, with their host decisions, stay outside
        # the graphs).
        original = block.forward
        block.forward = functools.partial(wrapper, original)

    def remove(self) -> None:
        """Restores every block's forward as it was before the cache wrapped it."""
        for block, original in zip(self.blocks.blocks, self._originals):
            if original is None:
                block.__dict__.pop("forward", None)
            else:
                block.forward = original

    @contextlib.contextmanager
    def running(self, state: CacheState | None):
        """Forwards inside this block use (and advance) `state`; None: the uncached model."""
        self.state = state
        try:
            yield
        finally:
            self.state = None
        if state is not None:
            state.finish_step()

    # -- decisions ----------------------------------------------------------------------
    def _decide(self, state: CacheState, signal: torch.Tensor) -> bool:
        policy = state.policy
        distance = None
        # Every rank takes this branch alike (same step, same history): the all-reduce inside
        # `agree` is entered by all of them or by none.
        if state.reference is not None and policy.needs_distance(state.step, state.total_steps):
            distance = relative_l1(self.agree(state.signal_sums(signal)))
        compute = policy.decide(distance, state.step, state.total_steps)
        if compute or policy.measures_every_step:
            state.reference = signal
        state.computing = compute
        state.computed.append(compute)
        state.distances.append(distance)
        if not compute and self.on_skip is not None:
            self.on_skip()
        return compute

    # -- wrappers -------------------------------------------------------------------------
    def _head(self, original, *args, **kwargs):
        state = self.state
        if state is None:
            return original(*args, **kwargs)
        state.forwards_this_step += 1
        blocks = self.blocks
        if state.policy.signal == "modulated_input":
            inputs = blocks.streams_in(args, kwargs)
            if not self._decide(state, blocks.modulated_input(self.head, args, kwargs)):
                return blocks.pack(_plus(inputs, state.residuals))  # every block skipped
            state.head_output = inputs
            return original(*args, **kwargs)
        video_in = blocks.streams_in(args, kwargs)[0]
        output = original(*args, **kwargs)
        streams = blocks.streams_out(output)
        if not self._decide(state, streams[0] - video_in):
            return blocks.pack(_plus(streams, state.residuals))
        state.head_output = streams
        return output

    def _tail(self, original, *args, last: bool, **kwargs):
        state = self.state
        if state is not None and not state.computing:
            return self.blocks.pack(self.blocks.streams_in(args, kwargs))  # passes through
        output = original(*args, **kwargs)
        if state is not None and last:
            state.residuals = tuple(o - h for o, h in zip(self.blocks.streams_out(output), state.head_output))
            state.head_output = None
        return output


def _plus(streams: Streams, residuals: Streams) -> Streams:
    return tuple(s + r for s, r in zip(streams, residuals))

