"""How the job store waits for locks, and how it tells a full disk from other errors (store.py).

SQLite: a write waits `busy_timeout` for another connection's lock (set on every connection, and
per write transaction to the wait its caller allows); PostgreSQL: `lock_timeout`, per transaction.
"""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

# Errors of a store that has no room left: SQLite's SQLITE_FULL ("database or disk is full"), an
# OS error passed through ("No space left on device"), PostgreSQL's disk_full (53100).
_FULL_TEXTS = ("database or disk is full", "no space left on device")
_FULL_SQLSTATES = frozenset({"53100"})


class StoreBusy(OperationalError):
    """A write did not get the store's lock within its wait (this process's other writes held it).
    The text reads as SQLite's "database is locked", which the API answers 503 server_busy."""

    def __init__(self, waited_s: float):
        super().__init__(None, None, TimeoutError(
            f"database is locked: this server's other writes held the job store for more than {waited_s:g} s"))


def is_full(error: BaseException) -> bool:
    """Whether a store error means its disk (or its quota) is full."""
    orig = getattr(error, "orig", error)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None), "sqlstate", None) or ""
    text = str(orig).lower()
    return sqlstate in _FULL_SQLSTATES or any(phrase in text for phrase in _FULL_TEXTS)


def changes(conn) -> int | None:
    """SQLite: rows this connection has changed so far; None elsewhere (every commit counts as a write)."""
    return getattr(conn.connection.dbapi_connection, "total_changes", None) if conn.dialect.name == "sqlite" else None


def limit_lock_wait(conn, wait_s: float) -> None:
    """How long this transaction's statements wait for a lock another connection holds."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{max(1, int(wait_s * 1000))}ms'")


def sqlite_pragmas(busy_timeout_s: float):
    def on_connect(dbapi_connection, _record_info) -> None:
        # WAL: readers never block the writer; busy_timeout: a second process waits instead of failing.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives the process being killed (kill -9), though not a power
        # loss in the last moments; it saves an fsync per progress update.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={max(0, int(busy_timeout_s * 1000))}")
        cursor.close()

    return on_connect
