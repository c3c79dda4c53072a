"""Who may see which job: a job is its creator's key's (and admins'). The read and delete routes
go through VideoAccess for one caller."""

from __future__ import annotations

from pathlib import Path

from ..contract.errors import not_found
from ..contract.schemas import Video, VideoDeleted, VideoList
from .admission import Caller
from .service import JobService
from .store import JobRecord


class VideoAccess:
    """The read and delete routes for one caller: a job another key created is answered like an
    unknown id (404 video_not_found), so ids of other tenants are not even confirmed."""

    def __init__(self, service: JobService):
        self.service = service

    def record(self, video_id: str, caller: Caller) -> JobRecord:
        """The job, if `caller` may see it; 404 video_not_found otherwise."""
        record = self.service.store.get(video_id)
        if record is None or not caller.sees(record.client):
            raise not_found(video_id)
        return record

    def view(self, record: JobRecord) -> Video:
        """The Video of a row the caller was allowed (no check here: see `record`)."""
        return self.service.view(record)

    def get(self, video_id: str, caller: Caller) -> Video:
        return self.view(self.record(video_id, caller))

    def list(self, caller: Caller, limit: int = 20, order: str = "desc", after: str | None = None) -> VideoList:
        """A page of the jobs `caller` may see (admins: every job)."""
        mine = None if caller.admin else (caller.client or "")  # "" matches no row
        return self.service.list(limit, order, after, client=mine)

    def content_path(self, video_id: str, caller: Caller) -> Path:
        self.record(video_id, caller)
        return self.service.content_path(video_id)

    def delete(self, video_id: str, caller: Caller) -> VideoDeleted:
        self.record(video_id, caller)
        return self.service.delete(video_id)
