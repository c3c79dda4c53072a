"""The response of GET /v1/videos/{id}/events: a stream over the job service's EventHub
(jobs/events.py: the one watcher per replica, the caps, the stream's text)."""

from __future__ import annotations

import anyio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..contract.errors import ApiError
from ..jobs.events import EventHub
from ..jobs.service import JobService
from .errors import bearer_token

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventStreamResponse(StreamingResponse):
    """The response of one /events request: 429 when a cap is reached, else the stream. Admission
    happens when the server sends it, on the event loop; the stream ends when the client leaves."""

    media_type = "text/event-stream"

    def __init__(self, hub: EventHub, video_id: str):
        self.hub, self.video_id = hub, video_id
        self.status_code, self.background = 200, None
        self.init_headers(dict(STREAM_HEADERS))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            sub = self.hub.subscribe(self.video_id, bearer_token(Headers(scope=scope)))
        except ApiError as refusal:
            await JSONResponse(refusal.body(), refusal.status, headers=refusal.headers)(scope, receive, send)
            return
        self.body_iterator = self.hub.events(sub)
        try:
            # Whatever the ASGI version, stop at a disconnect at once (not at the next keep-alive):
            # the stream's slot is free for the client's reconnect.
            async with anyio.create_task_group() as group:
                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client left while we sent
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            await self.body_iterator.aclose()
            self.hub.unsubscribe(sub)


def event_stream(service: JobService, video_id: str) -> EventStreamResponse:
    """The /events response for a job the caller may see (the route checked it), over the
    service's own hub."""
    return EventStreamResponse(service.events, video_id)
