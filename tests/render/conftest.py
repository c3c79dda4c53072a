import sys
from pathlib import Path

import pytest

from render_helpers import SubmitCounter

# The serving tests' helpers start a real server in-process; reuse them rather than copy them.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "serve"))

from serve_helpers import server  # noqa: E402,F401 - the shared fixture


@pytest.fixture
def submits(monkeypatch):
    """Records the prompt of every request submitted to an in-process engine."""
    from pipedit.runtime.engine_loop import EngineLoop

    counter, original = SubmitCounter(), EngineLoop.submit

    def counting(self, request):
        counter.prompts.append(request.prompt)
        return original(self, request)

    monkeypatch.setattr(EngineLoop, "submit", counting)
    return counter
