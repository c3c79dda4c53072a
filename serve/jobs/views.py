"""Engine events -> job row fields; job rows -> the API's Video object.

A stored row never makes a read fail: text that UTF-8 cannot carry is replaced (U+FFFD), and a
row that does not make a Video at all is shown as a failed one."""

from __future__ import annotations

import logging
from typing import Any

from pipedit.request import RequestEvent, RequestStatus

from ..contract.schemas import FINAL_STATUSES, PipeditExtras, Video, VideoError, echoed_fields
from .store import UNREADABLE, JobRecord

_log = logging.getLogger(__name__)

DENOISE_SHARE = 90  # progress reached when the last denoising step ends; decode and writing take the rest
DECODE_PROGRESS = 92

_STATUS = {
    RequestStatus.QUEUED: "queued",
    RequestStatus.ENCODING: "in_progress",
    RequestStatus.DENOISING: "in_progress",
    RequestStatus.DECODING: "in_progress",
}


def event_fields(event: RequestEvent, record: JobRecord, started_at: float | None = None) -> dict | None:
    """The row fields an event changes; None for final events (the outcome writes those).
    `started_at`: when the run's first event came (default: this one's)."""
    status = _STATUS.get(event.status)
    if status is None:
        return None
    extras = dict(record.extras, stage=event.status.value)
    progress = record.progress
    if event.status is RequestStatus.DENOISING:
        extras.update(step=event.step, total_steps=event.total_steps)
        progress = DENOISE_SHARE * event.step // max(1, event.total_steps)
    elif event.status is RequestStatus.DECODING:
        progress = DECODE_PROGRESS
    extras.setdefault("started_at", event.at if started_at is None else started_at)
    return {"status": status, "extras": extras, "progress": max(progress, record.progress)}


def clean_text(value: Any) -> Any:
    """`value` with every string in it made UTF-8-safe: lone surrogates become U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:  # a pair written as two halves joins; a lone half becomes U+FFFD
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {clean_text(k): clean_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_text(v) for v in value]
    return value


def expires_at(record: JobRecord, retention: float) -> int | None:
    """When the retention sweep removes a finished job (its finish time + serve.retention); None
    while it runs, or when jobs are kept forever (retention 0)."""
    if retention <= 0 or record.status not in FINAL_STATUSES:
        return None
    return int(record.finished_at + retention)


def to_video(record: JobRecord, model_name: str, queue_position: int | None = None, retention: float = 0.0) -> Video:
    """The Video of a row. `retention`: serve.retention, for expires_at (0: null)."""
    if record.unreadable:  # the store could not read the row (store._record)
        return _unreadable(record, model_name, record.error["message"])
    try:
        return _to_video(record, model_name, queue_position, retention)
    except Exception:  # noqa: BLE001 - a damaged row must not fail every list; show what it is
        _log.exception("job %s: its row does not make a Video; showing it as failed", record.id)
        return _unreadable(record, model_name, "the stored job cannot be read; delete it")


def _unreadable(record: JobRecord, model_name: str, message: str) -> Video:
    """A row that does not make a Video: failed, error unreadable_job (DELETE removes it)."""
    return Video(id=clean_text(str(record.id)), model=model_name, status="failed", progress=0,
                 created_at=int(record.created_at or 0), size="0x0", seconds="0",
                 error=VideoError(code=UNREADABLE, message=clean_text(message)),
                 pipedit=PipeditExtras(stage="failed", **{spec.api: spec.kind() for spec in echoed_fields()
                                                          if not spec.nullable}))


def _to_video(record: JobRecord, model_name: str, queue_position: int | None, retention: float) -> Video:
    params, extras = clean_text(record.params), clean_text(record.extras)
    error = clean_text(record.error)
    return Video(
        id=record.id, model=model_name, status=record.status, progress=min(100, max(0, record.progress)),
        created_at=int(record.created_at),
        completed_at=int(record.completed_at) if record.completed_at is not None else None,
        expires_at=expires_at(record, retention), prompt=params["prompt"],
        size=f"{params['width']}x{params['height']}",
        seconds=params["seconds"], error=VideoError(**error) if error else None,
        pipedit=PipeditExtras(
            stage=extras.get("stage", record.status), step=extras.get("step", 0),
            total_steps=extras.get("total_steps", params["num_inference_steps"]),
            queue_position=queue_position, timings=extras.get("timings", {}), input_reference=params.get("image"),
            # A job's params keep the echoed fields under their API names (contract/params.py's JobSettings);
            # rows from before a field existed lack it: null.
            **{spec.api: params[spec.api] if not spec.nullable else params.get(spec.api) for spec in echoed_fields()},
        ),
    )
