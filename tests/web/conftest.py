import sys
from pathlib import Path

import pytest

# The serving tests' helpers (a real engine loop on the demo model, the app on uvicorn).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "serve"))

from serve_helpers import server  # noqa: E402,F401 - the shared fixture


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (skips without it: see page_driver.INSTALL)."""
    from page_driver import launch

    driver = launch()
    yield driver
    driver.quit()
