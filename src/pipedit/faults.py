"""Fault injection for tests of failure handling: off unless the server's environment sets it.

PIPEDIT_FAULTS is a comma-separated list of faults; each is an action followed by `:`-separated
selectors, all of which must match for the fault to fire:

    kill:rank=1:step=2            rank 1's process exits (SIGKILL) before denoise step 2
    hang:op=all_to_all:rank=0     rank 0 blocks forever when it posts an all-to-all
    oom:phase=decode:once         torch.OutOfMemoryError in decode, only the first time
    fail:phase=denoise:aco        a RuntimeError in a denoise step that uses Aco helpers

actions:   kill | hang | oom | fail
selectors: rank=N (global rank), step=N (denoise step index, 0 = the first), phase=encode|denoise|decode,
           op=all_to_all|all_gather|all_reduce|broadcast|p2p (where that operation is posted: all_reduce
           is the step cache's agreement, broadcast the split decode's; faults without op fire
           at the start of a phase or step, the decode's after its latents arrived), prompt=TEXT (the
           request's prompt contains TEXT), aco (only in steps that use Aco helpers),
           once (fires at most once per server: the engine hands every rank it starts one state folder)

Nothing here is reachable from the HTTP API: only the process environment turns it on. Each rank
reads it once, into the FaultPoints of its RankState (pipedit.distributed.rank_state), which its
worker and collectives call.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import UserInputError

ENV = "PIPEDIT_FAULTS"
ONCE_DIR_ENV = "PIPEDIT_FAULTS_ONCE_DIR"  # set by the executor for its ranks
ACTIONS = ("kill", "hang", "oom", "fail")
PHASES = ("encode", "denoise", "decode")
OPS = ("all_to_all", "all_gather", "all_reduce", "broadcast", "p2p")  # each has a faults.check(op=...)


class InjectedFault(RuntimeError):
    pass


@dataclass(frozen=True)
class Fault:
    key: str  # names its `once` marker: the whole switch's value and the fault's position in it
    action: str
    rank: int | None = None
    step: int | None = None
    phase: str | None = None
    op: str | None = None
    prompt: str | None = None
    aco: bool = False
    once: bool = False

    def matches(self, where: dict) -> bool:
        if (self.op is None) != (where.get("op") is None):
            return False  # op faults fire where an operation is posted, the others at phase points
        for name in ("rank", "step", "phase", "op"):
            wanted = getattr(self, name)
            if wanted is not None and where.get(name) != wanted:
                return False
        if self.prompt is not None and self.prompt not in (where.get("prompt") or ""):
            return False
        return not self.aco or bool(where.get("aco"))


def parse(spec: str) -> list[Fault]:
    """The faults of a PIPEDIT_FAULTS value; UserInputError says what is wrong and what is allowed."""
    faults = []
    for index, text in enumerate(part.strip() for part in spec.split(",")):
        if not text:
            continue
        action, *selectors = text.split(":")
        if action not in ACTIONS:
            raise UserInputError(f"{ENV}: unknown action {action!r} in {text!r}; allowed: {', '.join(ACTIONS)}")
        fields: dict = {}
        for selector in selectors:
            name, has_value, value = selector.partition("=")
            fields.update(_selector(text, name.strip(), has_value, value.strip()))
        key = hashlib.sha1(f"{index}:{spec}".encode()).hexdigest()[:16]
        faults.append(Fault(key, action, **fields))
    return faults


def _selector(text: str, name: str, has_value: str, value: str) -> dict:
    if name in ("aco", "once") and not has_value:
        return {name: True}
    if name in ("rank", "step"):
        if not value.isdigit():
            raise UserInputError(f"{ENV}: {name} must be an integer >= 0 in {text!r}, got {value!r}")
        return {name: int(value)}
    choices = {"phase": PHASES, "op": OPS}.get(name)
    if choices is not None:
        if value not in choices:
            raise UserInputError(f"{ENV}: {name} must be one of {', '.join(choices)} in {text!r}, got {value!r}")
        return {name: value}
    if name == "prompt" and value:
        return {"prompt": value}
    raise UserInputError(f"{ENV}: unknown selector {name + has_value + value!r} in {text!r}; allowed: rank=N, "
                         f"step=N, phase=..., op=..., prompt=TEXT, aco, once")


# -- one rank's fault points (made by its worker, passed to its collectives) --------------------
class FaultPoints:
    """The faults one rank's process was started with, and where each of its threads is now.

    `once_dir`: the folder of `once` markers that every rank of a server shares (None: `once`
    faults fire every time they match)."""

    def __init__(self, rank: int = 0, spec: str = "", once_dir: str | None = None):
        self.rank = rank
        self.faults = parse(spec) if spec else []
        self.once_dir = once_dir
        self._where = threading.local()  # decode ranks run two calls at once (decode, next prompt's encode)

    @classmethod
    def from_environment(cls, rank: int, environment: Mapping[str, str] = os.environ) -> FaultPoints:
        """The switch as the executor hands it to a rank: PIPEDIT_FAULTS and its `once` folder."""
        return cls(rank, environment.get(ENV, ""), environment.get(ONCE_DIR_ENV) or None)

    def enter(self, **where) -> None:
        """Records what this thread is doing now (phase, step, prompt, aco) for the selectors."""
        self._where.values = where

    def check(self, **point) -> None:
        """A fault point: fires the first matching fault. `point` adds e.g. op="all_to_all"."""
        if not self.faults:
            return
        where = dict(getattr(self._where, "values", {}), rank=self.rank, **point)
        for fault in self.faults:
            if fault.matches(where) and (not fault.once or self._claim(fault)):
                _fire(fault, where)

    def _claim(self, fault: Fault) -> bool:
        if not self.once_dir:
            return True
        try:
            (Path(self.once_dir) / f"fault-{fault.key}").open("x").close()
            return True
        except FileExistsError:
            return False


def _fire(fault: Fault, where: dict) -> None:
    described = f"injected {fault.action} fault on rank {where['rank']} ({where.get('phase', '?')}"
    described += f", step {where['step']}" if where.get("step") is not None else ""
    described += f", {where['op']}" if where.get("op") else ""
    described += f"; {ENV})"
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.action == "hang":
        while True:  # only killing the process ends it, as with a wedged NCCL kernel
            time.sleep(1)
    if fault.action == "oom":
        import torch

        raise torch.OutOfMemoryError(described)
    raise InjectedFault(described)
