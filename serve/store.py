"""The durable job store: one `jobs` table through SQLAlchemy 2 Core.

SQLite (WAL mode) in the data folder by default; any SQLAlchemy URL works, so PostgreSQL can
take over later. Safe for one writer thread plus reader threads: writes are serialised by a
lock here, and WAL lets readers go on while a write commits.

Invariant: rows are ordered by (created_at, id); pagination and queue positions rely on it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, Column, Float, Integer, MetaData, String, Table, and_, create_engine, delete,
                        event, func, insert, or_, select, update)

UNFINISHED = ("queued", "in_progress")

_metadata = MetaData()
jobs = Table(
    "jobs", _metadata,
    Column("id", String(64), primary_key=True),
    Column("status", String(16), nullable=False, index=True),
    Column("progress", Integer, nullable=False, default=0),
    Column("created_at", Float, nullable=False, index=True),
    Column("completed_at", Float, nullable=True),
    Column("params", JSON, nullable=False),  # the resolved generation settings
    Column("extras", JSON, nullable=False),  # stage, step, total_steps, timings
    Column("error", JSON, nullable=True),  # {code, message}
    Column("video_file", String(255), nullable=True),  # a name inside the videos folder, never a path
)
_COLUMNS = tuple(c.name for c in jobs.columns)


@dataclass
class JobRecord:
    id: str
    status: str
    created_at: float
    params: dict[str, Any]
    progress: int = 0
    completed_at: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    error: dict[str, str] | None = None
    video_file: str | None = None


class JobStore:
    def __init__(self, url: str):
        sqlite = url.startswith("sqlite")
        self._engine = create_engine(url, connect_args={"check_same_thread": False} if sqlite else {})
        if sqlite:
            event.listen(self._engine, "connect", _sqlite_pragmas)
        _metadata.create_all(self._engine)
        self._write = threading.Lock()

    @classmethod
    def in_folder(cls, data_dir: str | Path) -> "JobStore":
        folder = Path(data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return cls(f"sqlite:///{folder / 'jobs.sqlite'}")

    def close(self) -> None:
        self._engine.dispose()

    # -- writes ---------------------------------------------------------------------------
    def add(self, record: JobRecord) -> None:
        values = {name: getattr(record, name) for name in _COLUMNS}
        with self._write, self._engine.begin() as conn:
            conn.execute(insert(jobs).values(**values))

    def update(self, job_id: str, **fields: Any) -> bool:
        """False if the job is gone (deleted meanwhile)."""
        unknown = set(fields) - set(_COLUMNS) - {"id"}
        if unknown or "id" in fields:
            raise ValueError(f"cannot update {sorted(unknown | ({'id'} & set(fields)))}; columns: {_COLUMNS[1:]}")
        with self._write, self._engine.begin() as conn:
            return conn.execute(update(jobs).where(jobs.c.id == job_id).values(**fields)).rowcount > 0

    def delete(self, job_id: str) -> bool:
        with self._write, self._engine.begin() as conn:
            return conn.execute(delete(jobs).where(jobs.c.id == job_id)).rowcount > 0

    # -- reads ----------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return _record(row) if row is not None else None

    def list(self, limit: int = 20, order: str = "desc", after: str | None = None) -> tuple[list[JobRecord], bool]:
        """A page of jobs and whether more follow. `after`: the last id of the previous page."""
        if order not in ("asc", "desc"):
            raise ValueError(f"order must be asc or desc, got {order!r}")
        query = select(jobs)
        if after is not None:
            anchor = self.get(after)
            if anchor is None:
                raise KeyError(after)
            query = query.where(_beyond(anchor, order))
        keys = (jobs.c.created_at, jobs.c.id) if order == "asc" else (jobs.c.created_at.desc(), jobs.c.id.desc())
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(*keys).limit(limit + 1)).all()
        return [_record(r) for r in rows[:limit]], len(rows) > limit

    def unfinished(self) -> list[JobRecord]:
        """Queued or in-progress jobs, oldest first."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(jobs).where(jobs.c.status.in_(UNFINISHED))
                                .order_by(jobs.c.created_at, jobs.c.id)).all()
        return [_record(r) for r in rows]

    def count(self, status: str) -> int:
        with self._engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(jobs).where(jobs.c.status == status)).scalar_one()

    def queue_position(self, record: JobRecord) -> int:
        """Queued jobs ahead of `record` (0: next to run); the position a new job gets is count('queued')."""
        with self._engine.connect() as conn:
            ahead = select(func.count()).select_from(jobs).where(
                jobs.c.status == "queued", _beyond(record, "desc"))
            return conn.execute(ahead).scalar_one()


def _beyond(anchor: JobRecord, order: str):
    """Rows strictly after `anchor` in the given order of (created_at, id)."""
    if order == "asc":
        return or_(jobs.c.created_at > anchor.created_at,
                   and_(jobs.c.created_at == anchor.created_at, jobs.c.id > anchor.id))
    return or_(jobs.c.created_at < anchor.created_at,
               and_(jobs.c.created_at == anchor.created_at, jobs.c.id < anchor.id))


def _record(row) -> JobRecord:
    return JobRecord(**{name: getattr(row, name) for name in _COLUMNS})


def _sqlite_pragmas(dbapi_connection, _record_info) -> None:
    # WAL: readers never block the writer; busy_timeout: a second process waits instead of failing.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a commit survives the process being killed (kill -9), though not a power
    # loss in the last moments; it saves an fsync per progress update on the engine's thread.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()
