"""The FastAPI app: OpenAI's video routes (/v1/videos...) over a JobService, plus /healthz.
A thin shim: every decision is the service's; this module only maps HTTP to its methods."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse

from .errors import ApiError
from .http_errors import bearer_check, install_error_handlers
from .jobs import JobService
from .schemas import FINAL_STATUSES, ErrorBody, Video, VideoCreateParams, VideoDeleted, VideoList
from .web import add_web_page

KEEPALIVE_S = 15.0
EVENT_POLL_S = 0.1  # how often the event stream looks at the job; the store is the truth across processes
_ERRORS = {code: {"model": ErrorBody} for code in (400, 401, 404, 429)}
_CREATE_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": VideoCreateParams.model_json_schema()},
    "multipart/form-data": {"schema": VideoCreateParams.model_json_schema()},
}}}


def build_app(service: JobService, api_keys: tuple[str, ...] | list[str] = ()) -> FastAPI:
    app = FastAPI(title="pipedit", summary="Text-to-video generation with OpenAI's video API")
    install_error_handlers(app)
    app.include_router(_videos(service, bool(api_keys)), dependencies=[Depends(bearer_check(tuple(api_keys)))])

    @app.get("/healthz", responses={503: {"model": ErrorBody}})
    def healthz():
        if service.healthy():
            return {"status": "ok"}
        body = ApiError(503, "the engine cannot take work", type="server_error", code="engine_unavailable")
        return JSONResponse(body.body(), status_code=503)

    add_web_page(app, service, tuple(api_keys))
    return app


def _videos(service: JobService, api_keys: bool) -> APIRouter:
    router = APIRouter(prefix="/v1/videos", responses=_ERRORS)

    @router.post("", response_model=Video, openapi_extra=_CREATE_BODY)
    async def create_video(request: Request) -> Video:
        params = VideoCreateParams.model_validate(await _body(request))
        return await run_in_threadpool(service.create, params, _bearer(request) if api_keys else None)

    @router.get("", response_model=VideoList)
    def list_videos(limit: int = Query(20), order: Literal["asc", "desc"] = "desc", after: str | None = None):
        return service.list(limit, order, after)

    @router.get("/{video_id}", response_model=Video)
    def retrieve_video(video_id: str):
        return service.get(video_id)

    @router.get("/{video_id}/content", response_class=FileResponse,
                responses={200: {"content": {"video/mp4": {}}, "description": "The mp4"}})
    def download_video(video_id: str, variant: Literal["video"] = "video"):
        return FileResponse(service.content_path(video_id), media_type="video/mp4", filename=f"{video_id}.mp4")

    @router.delete("/{video_id}", response_model=VideoDeleted)
    def delete_video(video_id: str):
        return service.delete(video_id)

    @router.get("/{video_id}/events", response_class=StreamingResponse,
                responses={200: {"content": {"text/event-stream": {}}, "description": "Video objects"}})
    def video_events(video_id: str):
        service.get(video_id)  # 404 before the stream starts
        return StreamingResponse(_changes(service, video_id), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return router


def _bearer(request: Request) -> str | None:
    """The API key the request carries (bearer_check has admitted it already)."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return key.strip() or None


async def _body(request: Request) -> dict:
    """JSON or form fields (multipart or urlencoded; the strings are coerced by the schema)."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        form = await request.form()
        files = [key for key, value in form.items() if not isinstance(value, str)]
        if files:  # e.g. OpenAI's input_reference image: silently dropping it would mislead
            raise ApiError(400, f"file uploads ({', '.join(files)}) are not supported: this server "
                           f"generates from text only", param=files[0], code="unsupported_parameter")
        return dict(form.items())
    try:
        body = await request.json()
    except ValueError:
        raise ApiError(400, "the body must be JSON or multipart/form-data with at least a prompt",
                       code="invalid_body") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the JSON body must be an object, e.g. {\"prompt\": \"a fox\"}", code="invalid_body")
    return body


async def _changes(service: JobService, video_id: str) -> AsyncIterator[str]:
    """Server-sent events: the Video as JSON whenever it changes, until a final status."""
    last, quiet_since = None, time.monotonic()
    while True:
        try:
            video = await run_in_threadpool(service.get, video_id)
        except ApiError as error:  # deleted while streaming
            yield f"event: error\ndata: {json.dumps(error.body())}\n\n"
            return
        text = video.model_dump_json()
        if text != last:
            last, quiet_since = text, time.monotonic()
            yield f"data: {text}\n\n"
        elif time.monotonic() - quiet_since > KEEPALIVE_S:  # long queues: proxies drop silent streams
            quiet_since = time.monotonic()
            yield ": keep-alive\n\n"
        if video.status in FINAL_STATUSES:
            return
        await asyncio.sleep(EVENT_POLL_S)
