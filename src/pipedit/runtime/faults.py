"""Fault injection for tests of failure handling (never set in production).

PIPEDIT_TEST_FAULT="<phase>:<marker>" makes workers raise in `phase` ("denoise" or "decode")
for requests whose prompt contains `marker`. Executors pass the variable on to Ray actors.
"""

from __future__ import annotations

import os

ENV = "PIPEDIT_TEST_FAULT"


class InjectedFault(RuntimeError):
    pass


def maybe_fail(phase: str, prompt: str) -> None:
    spec = os.environ.get(ENV, "")
    fault_phase, _, marker = spec.partition(":")
    if fault_phase == phase and marker and marker in prompt:
        raise InjectedFault(f"injected {phase} fault for a prompt containing {marker!r} ({ENV})")
