"""Engines shared by the tests of a session (conftest's `engines` fixture): one per configuration
(checkpoint, layout and every other setting: EngineConfig is a frozen dataclass, its repr names
them all), started the first time a test asks for it, closed at the session's end.

For tests that only send requests. A test that kills or fails ranks (PIPEDIT_FAULTS, a killed
process), changes the model or its adapters in place, reads an engine's counters from its start,
or needs the environment an engine starts with (the fault folder, PIPEDIT_CACHE) builds its own,
`with Engine(config) as engine:`, and closes it. The cluster's fixture closes the pool before it
replaces the session's Ray (engines started again on demand).
"""

from __future__ import annotations

import contextlib

from pipedit.config import EngineConfig
from pipedit.runtime.engine import Engine


class EnginePool:
    def __init__(self):
        self._engines: dict[str, Engine] = {}

    def get(self, config: EngineConfig) -> Engine:
        key = repr(config)
        engine = self._engines.get(key)
        if engine is None or engine.executor is None:  # None: a failed rebuild closed its group
            engine = self._engines[key] = Engine(config)
        return engine

    def close(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            with contextlib.suppress(Exception):  # its Ray may have ended first (fixtures' teardown order)
                engine.close()
