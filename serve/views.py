"""Engine events -> job row fields, and job rows -> the API's Video object."""

from __future__ import annotations

from pipedit.request import RequestEvent, RequestStatus

from .schemas import PipeditExtras, Video, VideoError
from .store import JobRecord

DENOISE_SHARE = 90  # progress reached when the last denoising step ends; decode and writing take the rest
DECODE_PROGRESS = 92

_STATUS = {
    RequestStatus.QUEUED: "queued",
    RequestStatus.ENCODING: "in_progress",
    RequestStatus.DENOISING: "in_progress",
    RequestStatus.DECODING: "in_progress",
}


def event_fields(event: RequestEvent, record: JobRecord) -> dict | None:
    """The row fields an event changes; None for final events (the outcome writes those)."""
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
    extras.setdefault("started_at", event.at)
    return {"status": status, "extras": extras, "progress": max(progress, record.progress)}


def to_video(record: JobRecord, model_name: str, queue_position: int | None = None) -> Video:
    params, extras = record.params, record.extras
    return Video(
        id=record.id, model=model_name, status=record.status, progress=record.progress,
        created_at=int(record.created_at),
        completed_at=int(record.completed_at) if record.completed_at is not None else None,
        expires_at=None, prompt=params["prompt"], size=f"{params['width']}x{params['height']}",
        seconds=params["seconds"], error=VideoError(**record.error) if record.error else None,
        pipedit=PipeditExtras(
            stage=extras.get("stage", record.status), step=extras.get("step", 0),
            total_steps=extras.get("total_steps", params["num_inference_steps"]),
            queue_position=queue_position, seed=params["seed"], num_frames=params["num_frames"],
            fps=params["fps"], num_inference_steps=params["num_inference_steps"],
            guidance_scale=params["guidance_scale"], timings=extras.get("timings", {}),
        ),
    )
