"""The job service's files: where a job's mp4 lives, and the sweep that removes what nobody
needs any more (jobs past their retention, with their files, and temporary files a crash left).

Files: a job's mp4 is `{id}.mp4`; while written it is `.{id}.attempt{N}.mp4` (checked and
fsynced before the rename), so `.{id}.*` covers every file of a job. File names come from
server-made ids only; no client string ever becomes a path.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

from .store import UNFINISHED, JobStore

_log = logging.getLogger(__name__)
SWEEP_EVERY_S = 60.0  # expired jobs and stale temporary files are looked for this often (at most)
# Temporary files of a job: `.{id}.attempt{N}.mp4`, the sound track muxed into it (`...mp4.wav`),
# and older versions' `..{id}.attempt{N}.mp4.partial.mp4`.
_TEMP = re.compile(r"^\.{1,2}(?P<id>video_[0-9a-f]+)\.attempt(?P<attempt>\d+)\.mp4(\.partial\.mp4|\.wav)?$")


class FileSweeper:
    """`lock`: the service's lock that a job's removal (row and files) holds, so that it never
    interleaves with a completion publishing that job's mp4. `retention`: seconds a finished job
    and its video are kept (0: forever)."""

    def __init__(self, store: JobStore, videos_dir: Path, retention: float, lock: threading.Lock):
        self.store, self.videos_dir, self.retention, self.lock = store, videos_dir, retention, lock

    @property
    def every_s(self) -> float:
        """How often the dispatcher sweeps: every minute, or twice per retention when shorter."""
        return min(SWEEP_EVERY_S, self.retention / 2) if self.retention > 0 else SWEEP_EVERY_S

    def video_path(self, video_id: str) -> Path:
        return self.videos_dir / f"{video_id}.mp4"

    def attempt_path(self, video_id: str, attempt: int) -> Path:
        """Where an attempt writes the job's mp4 before renaming it to video_path."""
        return self.videos_dir / f".{video_id}.attempt{attempt}.mp4"

    def delete_job(self, video_id: str, *, request: bool = False) -> bool:
        """Removes the job's row and every file of it; False when the row was gone already
        (another call removed it first). `request`: for an API request (the store waits about a
        second at most)."""
        with self.lock:
            removed = self.store.delete(video_id, request=request)
            self.remove_files(video_id)
            return removed

    def remove_files(self, video_id: str) -> None:
        self.video_path(video_id).unlink(missing_ok=True)
        for partial in self.videos_dir.glob(f".{video_id}.*"):
            partial.unlink(missing_ok=True)

    def remove_earlier_attempts(self, video_id: str, attempt: int) -> None:
        """Temporary files of the job's attempts before `attempt`, once `attempt` completed it (a
        replica that died writing one left it; the sweep would remove it within a minute)."""
        for path in self.videos_dir.glob(f".{video_id}.*"):
            match = _TEMP.match(path.name)
            if match is not None and int(match["attempt"]) < attempt:
                path.unlink(missing_ok=True)

    def sweep(self, now: float | None = None) -> list[str]:
        """Deletes the jobs (row and files) that finished more than `retention` seconds before
        `now` (default: the time), and stale temporary files; returns the deleted ids."""
        self.remove_stale_files()
        if self.retention <= 0:
            return []
        expired = self.store.finished_before((time.time() if now is None else now) - self.retention)
        for video_id in expired:
            self.delete_job(video_id)
        if expired:
            _log.info("deleted %d job(s) finished more than %.0f s ago", len(expired), self.retention)
        return expired

    def remove_stale_files(self) -> int:
        """Removes temporary mp4 files no run is writing (a crash left them): those of jobs that
        are gone, finished, or on a later attempt. Never a finished video. Returns how many."""
        removed = 0
        for path in self.videos_dir.glob(".*"):
            match = _TEMP.match(path.name)
            if match is None or not path.is_file():
                continue
            record = self.store.get(match["id"])
            if record is not None and record.status in UNFINISHED and record.attempt == int(match["attempt"]):
                continue  # the current attempt: some replica may be writing it right now
            path.unlink(missing_ok=True)
            removed += 1
        if removed:
            _log.info("removed %d stale temporary video file(s) from %s", removed, self.videos_dir)
        return removed
