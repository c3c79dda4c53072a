"""The database's clock, as seconds since the epoch in SQL: lease times are written and compared
with it, never with a host's clock.

Replicas on several nodes share one store but not one clock: a replica whose host runs ahead
would see every other replica's lease as lapsed and re-queue jobs that are still running; one
whose host lags would keep a dead replica's jobs pinned. The database's clock is the one they
all read (for SQLite, whose database is a file on one machine, it is that machine's clock: the
same for every process that shares the file).
"""

from __future__ import annotations

from sqlalchemy import Float, cast, extract, func, literal


def database_now(dialect: str):
    """A SQL expression for the database's current time, in seconds since the epoch (a float)."""
    if dialect == "sqlite":
        # julianday('now') has millisecond precision; 2440587.5 is the epoch's Julian day.
        return (func.julianday("now") - literal(2440587.5)) * literal(86400.0)
    if dialect == "postgresql":
        # clock_timestamp(), not now(): now() stays at the transaction's start.
        return cast(extract("epoch", func.clock_timestamp()), Float)
    raise ValueError(f"the job store has no clock for the {dialect} database; use SQLite or PostgreSQL")
