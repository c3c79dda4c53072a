"""The durable job store: one `jobs` table through SQLAlchemy 2 Core, shared by every replica.

SQLite (WAL mode) in the data folder by default; a PostgreSQL URL lets replicas on several
nodes share one store. Writes of this process are serialised by a lock; across processes the
database serialises them.

Ownership (how replicas share the queue): a queued job with no owner is free. `claim` takes the
oldest free one in ONE conditional UPDATE (on PostgreSQL its subquery locks the row with
FOR UPDATE SKIP LOCKED, so concurrent claimers skip each other's row instead of waiting), sets
owner, a lease expiry and attempt+1. Lease times are the database's clock (store_clock.py), the
one clock every replica shares. The owner renews the lease (`heartbeat`) while it runs the
job; `requeue_expired` frees jobs whose owner stopped renewing (it died). Every write of the
owner names (owner, attempt) and touches the row only while both still match and the job is
unfinished: a late result from a presumed-dead owner changes nothing, so each job reaches a
final status exactly once.

Invariant: rows are ordered by (created_at, id); pagination and queue positions rely on it.

Waiting: a write on a request's path (a create, a delete) waits at most `request_wait_s` (about a
second) for the store's lock, this process's writers' and the database's alike, then raises
StoreBusy (the API answers 503 server_busy); the dispatcher's writes wait `busy_timeout_s`.

Damaged rows: a row whose params, extras or error column is not JSON (a manual edit, an old
version) or not of the stored shape reads as a failed job with error `unreadable_job` (see
`_record`), so every read, a claim and a delete of it work.

Images (image-to-video): a job's input_reference bytes live in `job_images`, a table of their
own, so that listing and claiming jobs never reads them; they are added and deleted in the same
transaction as their job's row, so a job never exists without its image nor an image without its job.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, Column, Float, Integer, LargeBinary, MetaData, String, Table, and_, create_engine,
                        delete, event, func, insert, inspect, or_, select, text, update)
from sqlalchemy.exc import DBAPIError

from .store_clock import database_now
from .store_locks import StoreBusy, changes, is_full, limit_lock_wait, sqlite_pragmas

_log = logging.getLogger(__name__)

UNFINISHED = ("queued", "in_progress")
FINAL = ("completed", "failed", "cancelled")
BUSY_TIMEOUT_S = 5.0  # SQLite: how long a write waits for another process's lock before "database is locked"
REQUEST_WAIT_S = 1.0  # how long a write on a request's path (create, delete) waits for the lock
UNREADABLE = "unreadable_job"  # the error code of a row that cannot be read (see _record)
OWNERSHIP = ("owner", "lease_until", "attempt", "client")  # columns added after the first release

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
    Column("owner", String(128), nullable=True, index=True),  # the replica running it; None: free
    Column("lease_until", Float, nullable=True),  # the owner's claim lapses after this time
    Column("attempt", Integer, nullable=False, default=0),  # claims so far
    # The job's owner: a digest of the API key that created it (admission.client_of), never the key;
    # None: made without keys (or before owners existed). The API shows a job only to its owner and admins.
    Column("client", String(64), nullable=True, index=True),
)
_COLUMNS = tuple(c.name for c in jobs.columns)  # JobRecord's fields, but for `unreadable`
# The input_reference image of a job that has one (its encoded file bytes, as uploaded).
job_images = Table(
    "job_images", _metadata,
    Column("id", String(64), primary_key=True),  # the job's id
    Column("data", LargeBinary, nullable=False),
)


class _Unreadable(str):
    """What the JSON columns hold for text that is not JSON (its first characters, for the log)."""


def _loads(value: str):
    try:
        return json.loads(value)
    except ValueError:
        return _Unreadable(value[:80])


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
    owner: str | None = None
    lease_until: float | None = None
    attempt: int = 0
    client: str | None = None
    unreadable: str | None = None  # why the stored row cannot be read (it then reads as failed); None: it can

    @property
    def finished_at(self) -> float:
        """When a finished job reached its final status: extras' finished_at (the service writes
        it with every final status), else completed_at, else created_at (rows of older versions:
        a lower bound)."""
        return _finish_time(self.created_at, self.completed_at, self.extras)


def _finish_time(created_at: float, completed_at: float | None, extras: dict | None) -> float:
    value = extras.get("finished_at") if isinstance(extras, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return completed_at if completed_at is not None else created_at


class JobStore:
    def __init__(self, url: str, *, busy_timeout_s: float = BUSY_TIMEOUT_S, request_wait_s: float = REQUEST_WAIT_S):
        """`url`: any SQLAlchemy URL, e.g. sqlite:///data/jobs.sqlite or
        postgresql+psycopg://user@host:5432/pipedit. `busy_timeout_s`: how long a background
        write waits for the lock (SQLite: another process's); `request_wait_s`: how long a write
        on a request's path waits. Then they raise OperationalError "database is locked" (the
        API answers 503 server_busy)."""
        self.url = url
        sqlite = url.startswith("sqlite")
        self._engine = create_engine(url, connect_args={"check_same_thread": False} if sqlite else {},
                                     pool_pre_ping=not sqlite, json_deserializer=_loads)
        if sqlite:
            event.listen(self._engine, "connect", sqlite_pragmas(busy_timeout_s))
        _metadata.create_all(self._engine)
        _add_missing_columns(self._engine)
        self._now = database_now(self._engine.dialect.name)  # lease times: see store_clock.py
        self._write = threading.Lock()
        self.busy_timeout_s, self.request_wait_s = busy_timeout_s, request_wait_s
        self.full: str | None = None  # the last write's error when it found no room; None since one succeeded

    @classmethod
    def in_folder(cls, data_dir: str | Path, **options: Any) -> "JobStore":
        folder = Path(data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return cls(f"sqlite:///{folder / 'jobs.sqlite'}", **options)

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    def close(self) -> None:
        self._engine.dispose()

    # -- writes ---------------------------------------------------------------------------
    def add(self, record: JobRecord, image: bytes | None = None) -> None:
        """`image`: the job's input_reference bytes, stored with the row (see `image`). A request's
        write: it waits `request_wait_s` at most."""
        values = {name: getattr(record, name) for name in _COLUMNS}
        with self._writing(self.request_wait_s) as conn:
            conn.execute(insert(jobs).values(**values))
            if image is not None:
                conn.execute(insert(job_images).values(id=record.id, data=bytes(image)))

    def update(self, job_id: str, **fields: Any) -> bool:
        """False if the job is gone (deleted meanwhile)."""
        return self._update(jobs.c.id == job_id, fields)

    def update_owned(self, job_id: str, owner: str, attempt: int, /, **fields: Any) -> bool:
        """Updates the job only while `owner` holds this `attempt` of it and it is unfinished;
        False otherwise (deleted, re-queued after a lapsed lease, or already final). Positional
        only: `fields` may set the `owner` column itself (None hands the job back)."""
        return self._update(and_(jobs.c.id == job_id, jobs.c.owner == owner, jobs.c.attempt == attempt,
                                 jobs.c.status.in_(UNFINISHED)), fields)

    def finished_before(self, before: float, limit: int = 500) -> list[str]:
        """Ids of finished jobs (completed, failed, cancelled) that finished before `before`,
        oldest first, at most `limit` (the retention sweep's)."""
        # A job's finish time is never earlier than coalesce(completed_at, created_at): the query
        # gives a superset, the exact time is checked on the rows.
        query = (select(jobs.c.id, jobs.c.created_at, jobs.c.completed_at, jobs.c.extras)
                 .where(jobs.c.status.in_(FINAL), func.coalesce(jobs.c.completed_at, jobs.c.created_at) < before)
                 .order_by(jobs.c.created_at, jobs.c.id).limit(limit))
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
        return [row.id for row in rows if _finish_time(row.created_at, row.completed_at, row.extras) < before]

    def delete(self, job_id: str, *, request: bool = False) -> bool:
        """Removes the job's row and its image, in one transaction; True only for the one call
        that removed the row (of two deleting the same job at once, the other gets False).
        `request`: a request's write (it waits `request_wait_s` at most)."""
        with self._writing(self.request_wait_s if request else self.busy_timeout_s) as conn:
            removed = conn.execute(delete(jobs).where(jobs.c.id == job_id)).rowcount > 0
            if removed:
                conn.execute(delete(job_images).where(job_images.c.id == job_id))
            return removed

    # -- ownership ------------------------------------------------------------------------
    def claim(self, owner: str, lease_s: float, skip: set[str] | frozenset[str] = frozenset()) -> JobRecord | None:
        """The oldest free queued job, now owned by `owner` for `lease_s` seconds; None if none.
        `skip`: ids not to take (the claimer still runs an earlier attempt of them)."""
        free = [jobs.c.status == "queued", jobs.c.owner.is_(None)] + ([jobs.c.id.not_in(list(skip))] if skip else [])
        for _ in range(5):  # a lost race (another replica took the row first) tries the next one
            oldest = (select(jobs.c.id).where(*free).order_by(jobs.c.created_at, jobs.c.id).limit(1)
                      .with_for_update(skip_locked=True).scalar_subquery())
            claim = (update(jobs).where(jobs.c.id == oldest, *free)
                     .values(owner=owner, lease_until=self._now + lease_s, attempt=jobs.c.attempt + 1)
                     .returning(*jobs.c))
            with self._writing() as conn:
                row = conn.execute(claim).first()
                if row is not None:
                    return _record(row)
                if not conn.execute(select(func.count()).select_from(jobs).where(*free)).scalar_one():
                    return None
        return None

    def heartbeat(self, owner: str, job_ids: list[str] | set[str], lease_s: float) -> set[str]:
        """Extends the lease of the given jobs `owner` still holds; returns those ids (a job
        missing from the answer was deleted, finished or taken back: stop running it)."""
        if not job_ids:
            return set()
        renew = (update(jobs).where(jobs.c.id.in_(list(job_ids)), jobs.c.owner == owner,
                                    jobs.c.status.in_(UNFINISHED))
                 .values(lease_until=self._now + lease_s).returning(jobs.c.id))
        with self._writing() as conn:
            return set(conn.execute(renew).scalars())

    def requeue_expired(self) -> list[str]:
        """Frees the unfinished jobs whose owner's lease lapsed (and rows running with no owner,
        left by a version without ownership): they run again from the start. Returns their ids."""
        lapsed = and_(jobs.c.status.in_(UNFINISHED), or_(
            and_(jobs.c.owner.is_not(None), jobs.c.lease_until < self._now),
            and_(jobs.c.owner.is_(None), jobs.c.status == "in_progress")))
        return self._free(lapsed)

    def release(self, owner: str, prefix: bool = False) -> list[str]:
        """Frees every unfinished job `owner` holds (it is shutting down; `prefix`: every owner whose
        name starts with it, a server's replicas as it stops); returns their ids."""
        held = jobs.c.owner.startswith(owner, autoescape=True) if prefix else jobs.c.owner == owner
        return self._free(and_(jobs.c.status.in_(UNFINISHED), held))

    # -- reads ----------------------------------------------------------------------------
    def lease_holds(self, job_id: str, owner: str, attempt: int) -> bool:
        """Whether `owner` holds `attempt` of the unfinished job and its lease has not lapsed
        (a read: it answers while writes wait for a lock)."""
        query = select(func.count()).select_from(jobs).where(
            jobs.c.id == job_id, jobs.c.owner == owner, jobs.c.attempt == attempt,
            jobs.c.status.in_(UNFINISHED), jobs.c.lease_until > self._now)
        with self._engine.connect() as conn:
            return conn.execute(query).scalar_one() > 0

    def clock(self) -> float:
        """The database's time (seconds since the epoch), the clock of lease_until."""
        with self._engine.connect() as conn:
            return float(conn.execute(select(self._now)).scalar_one())

    def get(self, job_id: str) -> JobRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return _record(row) if row is not None else None

    def image(self, job_id: str) -> bytes | None:
        """The job's input_reference bytes; None when it has none (or is gone)."""
        with self._engine.connect() as conn:
            data = conn.execute(select(job_images.c.data).where(job_images.c.id == job_id)).scalar_one_or_none()
        return None if data is None else bytes(data)

    def list(self, limit: int = 20, order: str = "desc", after: str | None = None, *,
             client: str | None = None) -> tuple[list[JobRecord], bool]:
        """A page of jobs and whether more follow. `after`: the last id of the previous page.
        `client`: only that owner's jobs (an `after` of another owner is unknown: KeyError);
        None: every job."""
        if order not in ("asc", "desc"):
            raise ValueError(f"order must be asc or desc, got {order!r}")
        query = select(jobs)
        if client is not None:
            query = query.where(jobs.c.client == client)
        if after is not None:
            anchor = self.get(after)
            if anchor is None or (client is not None and anchor.client != client):
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

    def count(self, status: str, client: str | None = None, owner_prefix: str | None = None) -> int:
        """Jobs with `status` (of one client, of owners whose name starts with `owner_prefix`, when given)."""
        query = select(func.count()).select_from(jobs).where(jobs.c.status == status)
        if client is not None:
            query = query.where(jobs.c.client == client)
        if owner_prefix is not None:
            query = query.where(jobs.c.owner.startswith(owner_prefix, autoescape=True))
        with self._engine.connect() as conn:
            return conn.execute(query).scalar_one()

    def queue_position(self, record: JobRecord) -> int:
        """Queued jobs ahead of `record` (0: next to run); the position a new job gets is count('queued')."""
        with self._engine.connect() as conn:
            ahead = select(func.count()).select_from(jobs).where(
                jobs.c.status == "queued", _beyond(record, "desc"))
            return conn.execute(ahead).scalar_one()

    # -- helpers --------------------------------------------------------------------------
    @contextmanager
    def _writing(self, wait_s: float | None = None):
        """A write transaction that waits at most `wait_s` (default busy_timeout_s) for this
        process's writers and then for the database's lock; notes whether the store is full."""
        wait_s = self.busy_timeout_s if wait_s is None else wait_s
        started = time.monotonic()
        if not self._write.acquire(timeout=wait_s):
            raise StoreBusy(wait_s)
        try:
            with self._engine.begin() as conn:
                limit_lock_wait(conn, max(0.0, wait_s - (time.monotonic() - started)))
                before = changes(conn)
                yield conn
                wrote = before is None or changes(conn) != before
            if wrote:  # a write that changed nothing (a claim finding no job) says nothing about room
                self.full = None
        except DBAPIError as error:
            if is_full(error):
                if self.full is None:
                    _log.error("the job store has no room left: %s", error.orig)
                self.full = str(error.orig)
            raise
        finally:
            self._write.release()

    def _update(self, where, fields: dict[str, Any]) -> bool:
        unknown = set(fields) - set(_COLUMNS) - {"id"}
        if unknown or "id" in fields:
            raise ValueError(f"cannot update {sorted(unknown | ({'id'} & set(fields)))}; columns: {_COLUMNS[1:]}")
        with self._writing() as conn:
            return conn.execute(update(jobs).where(where).values(**fields)).rowcount > 0

    def _free(self, where) -> list[str]:
        free = (update(jobs).where(where).values(status="queued", owner=None, lease_until=None, progress=0,
                                                 extras={"stage": "queued"}).returning(jobs.c.id))
        with self._writing() as conn:
            return list(conn.execute(free).scalars())


def _beyond(anchor: JobRecord, order: str):
    """Rows strictly after `anchor` in the given order of (created_at, id)."""
    if order == "asc":
        return or_(jobs.c.created_at > anchor.created_at,
                   and_(jobs.c.created_at == anchor.created_at, jobs.c.id > anchor.id))
    return or_(jobs.c.created_at < anchor.created_at,
               and_(jobs.c.created_at == anchor.created_at, jobs.c.id < anchor.id))


def _record(row) -> JobRecord:
    record = JobRecord(**{name: getattr(row, name) for name in _COLUMNS})
    damaged = [name for name, kind in (("params", dict), ("extras", dict), ("error", (dict, type(None))))
               if not isinstance(getattr(record, name), kind)]
    if not damaged:
        return record
    # Shown as failed everywhere (list, get, content: 404, delete works); a claim fails it for good.
    why = ", ".join(f"its {name} column is {'not JSON' if isinstance(getattr(record, name), _Unreadable) else 'not a JSON object'}"
                    for name in damaged)
    return JobRecord(id=record.id, status="failed", created_at=record.created_at or 0.0, params={},
                     completed_at=record.completed_at, extras={"stage": "failed"}, owner=record.owner,
                     lease_until=record.lease_until, attempt=record.attempt, client=record.client,
                     error={"code": UNREADABLE, "message": f"the stored job cannot be read ({why}); delete it"},
                     unreadable=why)


def _add_missing_columns(engine) -> None:
    """Stores written before ownership existed get its columns (create_all adds tables only)."""
    present = {c["name"] for c in inspect(engine).get_columns("jobs")}
    kinds = {"owner": "VARCHAR(128)", "lease_until": "FLOAT", "attempt": "INTEGER NOT NULL DEFAULT 0",
             "client": "VARCHAR(64)"}
    missing = [name for name in OWNERSHIP if name not in present]
    if missing:
        # PostgreSQL: IF NOT EXISTS, so replicas starting together on an old store all succeed.
        guard = "IF NOT EXISTS " if engine.dialect.name == "postgresql" else ""
        with engine.begin() as conn:
            for name in missing:
                conn.execute(text(f"ALTER TABLE jobs ADD COLUMN {guard}{name} {kinds[name]}"))
            for name in ("owner", "client"):  # the indexes create_all gives new tables (lookups by owner)
                if name in missing:
                    conn.execute(text(f"CREATE INDEX IF NOT EXISTS ix_jobs_{name} ON jobs ({name})"))
