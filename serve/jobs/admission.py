"""Backpressure: whether the store takes one more job, and when a refused client should retry.

The limits count queued rows in the shared store, so they hold across replicas. Limits are
checked, then the row is written: two replicas admitting at the same moment may each let one
job past the limit (a soft limit, by at most one job per replica)."""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass

from ..contract.errors import ApiError
from ..contract.params import ServiceLimits
from .store import JobStore

DEFAULT_RETRY_AFTER_S = 10  # no job has finished here yet: a guess of one job's duration
MAX_RETRY_AFTER_S = 600


def client_of(api_key: str | None) -> str | None:
    """What the store keeps of a client's key: a digest, so the table never holds a secret. It is
    both the job's owner (who may see it, see Caller) and what the per-key queue limit counts."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32] if api_key else None


@dataclass(frozen=True)
class Caller:
    """Who sends a request: `client` is client_of(their key) (None without keys); `admin` callers
    (serve.admin_keys, or everyone when the server has no keys) see every job."""

    client: str | None
    admin: bool = False

    def sees(self, record_client: str | None) -> bool:
        """Whether a job owned by `record_client` is visible to this caller. Rows without an owner
        (written before owners existed, or while the server had no keys) are admins' only."""
        return self.admin or (self.client is not None and record_client == self.client)


EVERYONE = Caller(client=None, admin=True)  # a server without API keys


class Admission:
    def __init__(self, store: JobStore, limits: ServiceLimits, replicas: int = 1):
        self.store, self.limits, self.replicas = store, limits, max(1, replicas)
        self._durations: deque[float] = deque(maxlen=20)

    def job_finished(self, seconds: float) -> None:
        """A job's run time (claim to result), for the Retry-After estimate."""
        self._durations.append(seconds)

    def check(self, client: str | None) -> None:
        """Raises 429 queue_full when the server's or this client's queue is full."""
        queued = self.store.count("queued")
        if queued >= self.limits.max_queued:
            raise self._full(f"{queued} videos are queued, the most this server takes",
                             queued - self.limits.max_queued + 1)
        if client is None:
            return
        mine = self.store.count("queued", client=client)
        if mine >= self.limits.max_queued_per_key:
            raise self._full(f"{mine} videos of this API key are queued, the most one key may have "
                             f"(serve.max_queued_per_key)", mine - self.limits.max_queued_per_key + 1)

    def retry_after(self, jobs_to_wait: int = 1) -> int:
        """Seconds until about `jobs_to_wait` jobs finish: recent job durations spread over the
        replicas (a default before any job finished), at least 1 s."""
        average = sum(self._durations) / len(self._durations) if self._durations else DEFAULT_RETRY_AFTER_S
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(average * jobs_to_wait / self.replicas)))

    def _full(self, why: str, jobs_to_wait: int) -> ApiError:
        retry = self.retry_after(jobs_to_wait)
        return ApiError(429, f"{why}; retry in about {retry} s (the Retry-After header)", code="queue_full",
                        type="rate_limit_error", headers={"Retry-After": str(retry)})
