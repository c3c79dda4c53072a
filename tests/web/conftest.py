import sys
from pathlib import Path

import pytest

# The serving tests' helpers (a real engine core on the demo model, the app on uvicorn).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "serve"))

from serve_helpers import start  # noqa: E402


@pytest.fixture(scope="module")
def server(demo_checkpoint, tmp_path_factory):
    """A running service (engine, store, HTTP) for the tests of one module."""
    running = start(demo_checkpoint, tmp_path_factory.mktemp("data"))
    yield running
    running.close()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (skips without it: see page_driver.INSTALL)."""
    from page_driver import launch

    driver = launch()
    yield driver
    driver.quit()
