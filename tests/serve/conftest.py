import pytest

from serve_helpers import start


@pytest.fixture(scope="module")
def server(demo_checkpoint, tmp_path_factory):
    """A running service (engine, store, HTTP) for the tests of one module."""
    running = start(demo_checkpoint, tmp_path_factory.mktemp("data"))
    yield running
    running.close()
