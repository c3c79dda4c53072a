import pytest

from serve_helpers import server  # noqa: F401 - the shared fixture


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the session; skips (saying how to install it) where it is missing."""
    from postgres_server import INSTALL_HINT, NO_ACCOUNT, PostgresServer, find_binaries, run_as

    bin_dir = find_binaries()
    if bin_dir is None:
        pytest.skip(INSTALL_HINT)
    try:
        run_as()
    except KeyError:
        pytest.skip(NO_ACCOUNT)
    running = PostgresServer(bin_dir).start()
    yield running
    running.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """One job store URL per database: SQLite in the test's folder, a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    return request.getfixturevalue("postgres").new_database()
