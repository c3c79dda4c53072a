"""The FastAPI app: OpenAI's video routes (/v1/videos...) over a JobService, plus /healthz.
A thin shim: every decision is the service's (who may see a job: jobs/access.py's VideoAccess;
what every request must pass first: errors.RequestGuard); this module only maps HTTP to its methods."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from sqlalchemy.exc import IntegrityError
from starlette.formparsers import MultiPartException, MultiPartParser

from ..contract import reference
from ..contract.errors import ApiError
from ..contract.params import bad_text
from ..contract.schemas import FORM, ErrorBody, Video, VideoCreateParams, VideoDeleted, VideoList
from ..jobs.access import VideoAccess
from ..jobs.admission import Caller
from ..jobs.service import JobService
from . import idempotency, lora_form
from .downloads import video_response
from .errors import (RequestGuard, SafeJSONResponse, bearer_check, bearer_token, install_error_handlers,
                     is_loopback, unreadable_form)
from .event_stream import event_stream
from .headers import SecurityHeaders, add_docs
from .web import add_web_page

_ERRORS = {code: {"model": ErrorBody} for code in (400, 401, 403, 404, 413, 415, 429, 503)}


def _create_schema(image: dict) -> dict:
    """The create fields plus input_reference (read by the route, not by the schema)."""
    schema = VideoCreateParams.model_json_schema()
    schema["properties"]["input_reference"] = dict(image, description=(
        "Image-to-video: the image the video starts from (png, jpeg or webp), for models that take one."))
    return schema


_DATA_URL = {"type": "string", "pattern": "^data:", "examples": ["data:image/png;base64,iVBORw0KGgo..."]}
_CREATE_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": _create_schema({"anyOf": [_DATA_URL, {
        "type": "object", "properties": {"image_url": _DATA_URL}, "required": ["image_url"]}]})},
    "multipart/form-data": {"schema": _create_schema({"type": "string", "format": "binary"})},
}}}


def build_app(service: JobService, api_keys: tuple[str, ...] | list[str] = (), *,
              admin_keys: tuple[str, ...] | list[str] = (), host: str | None = "127.0.0.1",
              allowed_hosts: tuple[str, ...] | list[str] = (), docs: bool = False) -> FastAPI:
    """The app over `service`. `api_keys`: accepted Bearer keys (none: no authentication; every
    caller sees every job); `admin_keys` (also in api_keys) see every key's jobs. `host`: the
    address the server is bound to (serve.host; default loopback): on loopback only loopback Host
    names and `allowed_hosts` are answered. The body cap is service.limits.max_body_bytes; a
    multipart create's (it may upload an input_reference image) is max_upload_bytes. `docs`:
    serve Swagger UI at /docs (serve.docs; its script comes from a CDN, see headers.py)."""
    if not set(admin_keys) <= set(api_keys):
        raise ValueError("admin_keys must also be api_keys")
    app = guarded_app(service.limits, host, allowed_hosts, docs=docs)
    auth = bearer_check(tuple(api_keys), tuple(admin_keys))
    app.include_router(_videos(service, auth), dependencies=[Depends(auth)])

    @app.get("/healthz", responses={503: {"model": ErrorBody}})
    def healthz():
        return health_reply(*service.health())

    add_web_page(app, service, tuple(api_keys))
    return app


def guarded_app(limits, host: str | None, allowed_hosts, *, docs: bool = False) -> FastAPI:
    """A FastAPI app with pipedit's error bodies, request guard (Host names, cross-site writes,
    body caps and timeouts from `limits`, a ServiceLimits) and security headers: the API's, and the
    /healthz front's (ray_app/health_front.py)."""
    app = FastAPI(title="pipedit", summary="Text-to-video generation with OpenAI's video API",
                  default_response_class=SafeJSONResponse, docs_url=None, redoc_url=None)
    if docs:
        add_docs(app)
    install_error_handlers(app)
    app.add_middleware(RequestGuard, max_body_bytes=getattr(limits, "max_body_bytes", 1 << 20),
                       loopback=host is None or is_loopback(host), allowed_hosts=tuple(allowed_hosts),
                       max_upload_bytes=getattr(limits, "max_upload_bytes", None), upload_paths=("/v1/videos",),
                       **{name: getattr(limits, name) for name in ("body_timeout_s", "body_min_rate", "linger_s")
                          if hasattr(limits, name)})
    app.add_middleware(SecurityHeaders, docs=docs)  # outermost: the guard's refusals carry the headers too
    return app


def health_reply(status: str, reason: str | None):
    """/healthz's answer to ("ok" | "degraded" | "down", reason): 200 with the status (degraded:
    jobs still queue and run, see the reason), or 503 engine_unavailable when down."""
    if status != "down":
        return {"status": status, **({"reason": reason} if reason else {})}
    body = ApiError(503, reason or "the engine cannot take work", type="server_error", code="engine_unavailable")
    return JSONResponse(body.body(), status_code=503)


def _videos(service: JobService, auth) -> APIRouter:
    """`auth`: the dependency that admits a request and names its Caller (the router runs it;
    FastAPI caches it per request, so the routes get the same Caller)."""
    router = APIRouter(prefix="/v1/videos", responses=_ERRORS)
    access = VideoAccess(service)

    @router.post("", response_model=Video, openapi_extra=_CREATE_BODY)
    async def create_video(request: Request, response: Response, caller: Caller = Depends(auth)) -> Video:
        retry_key = idempotency.key_of(request.headers)
        job_id = idempotency.job_id_for(caller.client, retry_key) if retry_key else None
        earlier = await run_in_threadpool(service.store.get, job_id) if job_id else None
        if earlier is None:
            # Admission first: a full queue answers 429 before the body is read, parsed or its image
            # decoded (create checks again as it adds the row: this is the early, cheap refusal).
            await run_in_threadpool(service.admission.check, caller.client)
        fields, image, form = await _body(request, getattr(service.limits, "max_upload_bytes", 1 << 20))
        params = VideoCreateParams.model_validate(fields, context={FORM: form})
        # The key goes to the service only when keys are configured (caller.client is its digest).
        key = bearer_token(request.headers) if caller.client is not None else None
        if retry_key is None:
            return await run_in_threadpool(service.create, params, key, image)
        digest = idempotency.request_digest(params.given(), image)
        if earlier is None:
            try:
                return await run_in_threadpool(service.create, params, key, image, job_id=job_id, request_digest=digest)
            except IntegrityError:  # the same key's create won a moment ago (a parallel retry, another replica)
                earlier = await run_in_threadpool(service.store.get, job_id)
                if earlier is None:
                    raise
        idempotency.check_same_request(earlier.params, digest, retry_key, job_id)
        response.headers["Idempotent-Replayed"] = "true"
        return await run_in_threadpool(service.get, job_id)  # as it is now

    @router.get("", response_model=VideoList)
    def list_videos(limit: int = Query(20), order: Literal["asc", "desc"] = "desc", after: str | None = None,
                    caller: Caller = Depends(auth)):
        return access.list(caller, limit, order, after)

    @router.get("/{video_id}", response_model=Video)
    def retrieve_video(video_id: str, caller: Caller = Depends(auth)):
        return access.get(video_id, caller)

    @router.get("/{video_id}/content", response_class=FileResponse,
                responses={200: {"content": {"video/mp4": {}}, "description": "The mp4 (206: the byte range asked)"}})
    def download_video(request: Request, video_id: str, variant: Literal["video"] = "video",
                       caller: Caller = Depends(auth)):
        # Opened here, before any byte is answered: a delete or sweep from now on cannot cut it.
        return video_response(access.content_path(video_id, caller), video_id, request.headers.get("range"))

    @router.delete("/{video_id}", response_model=VideoDeleted)
    def delete_video(video_id: str, caller: Caller = Depends(auth)):
        return access.delete(video_id, caller)

    @router.get("/{video_id}/events", response_class=StreamingResponse,
                responses={200: {"content": {"text/event-stream": {}}, "description": "Video objects"}})
    def video_events(video_id: str, caller: Caller = Depends(auth)):
        access.record(video_id, caller)  # 404 before the stream starts: unknown, or another key's job
        return event_stream(service, video_id)  # text/event-stream; 429 too_many_streams beyond the caps

    return router




async def _body(request: Request, max_part_bytes: int) -> tuple[dict, bytes | None, bool]:
    """The create fields, the input_reference image's bytes (None without one) and whether they
    came as a form: from JSON (application/json) or multipart/form-data (the strings are coerced
    by the schema). Other
    content types get 415: text/plain and urlencoded bodies are what another web page can make a
    browser send without asking this server first (CORS "simple" requests)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media == "multipart/form-data":
        return *await _form(request, max_part_bytes), True
    body = await _json(request, media)
    value = body.pop(reference.PARAM, None)  # an explicit null counts as not sent, as for every field
    return body, None if value is None else reference.from_json(value), False


class _Utf8FormParser(MultiPartParser):
    """Starlette's multipart parser, except that a text field whose bytes are not UTF-8 (the
    default charset of form data) is refused naming the field, as the JSON route refuses bad text;
    starlette would read those bytes as Latin-1 and the job would store mojibake.
    Hazard: overrides MultiPartParser.on_part_end and reads its _current_part and _charset
    (starlette 1.10); tests/serve/test_hostile_input.py fails if an upgrade changes them."""

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is None and self._charset == "utf-8":
            try:
                bytes(part.data).decode("utf-8")
            except UnicodeDecodeError as error:
                raise bad_text(part.field_name, f"is not UTF-8 text (byte 0x{part.data[error.start]:02x} at byte "
                                                f"{error.start}): send multipart form fields as UTF-8") from None
        super().on_part_end()


async def _form(request: Request, max_part_bytes: int) -> tuple[dict, bytes | None]:
    """`max_part_bytes`: the most one part may hold (a data URL field too); the whole body is
    capped before this by RequestGuard (serve.max_upload_bytes)."""
    parser = _Utf8FormParser(request.headers, request.stream(), max_part_size=max_part_bytes)
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise unreadable_form(error.message) from None
    try:
        files = {key: value for key, value in form.multi_items() if not isinstance(value, str)}
        fields = {key: value for key, value in form.multi_items()
                  if isinstance(value, str) and key not in lora_form.FORM_KEYS}
        if (loras := lora_form.from_form(form)) is not None:
            fields[lora_form.PARAM] = loras
        others = [key for key in files if key != reference.PARAM]
        if others:  # silently dropping a file would mislead
            raise ApiError(400, f"file uploads other than {reference.PARAM} ({', '.join(others)}) are not taken",
                           param=others[0], code="unsupported_parameter")
        if len(form.getlist(reference.PARAM)) + sum(k in fields for k in reference.OBJECT_FIELDS) > 1:
            raise ApiError(400, f"send one {reference.PARAM} image, not several", param=reference.PARAM,
                           code="invalid_value")
        image = await files[reference.PARAM].read() if reference.PARAM in files else None
        if image is None:
            image = reference.from_form_fields(fields)
        return fields, image
    finally:
        await form.close()  # spooled upload files


async def _json(request: Request, media: str) -> dict:
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(415, f"Content-Type {media or '(none)'} is not accepted: send the body as application/json "
                       f"(or multipart/form-data), with at least a prompt", param="Content-Type",
                       code="unsupported_media_type")
    try:
        body = await request.json()
    except RecursionError:
        raise ApiError(400, "the JSON body is nested too deeply to read; send a flat object such as "
                       "{\"prompt\": \"a fox\"}", code="invalid_body") from None
    except ValueError:
        raise ApiError(400, "the body must be a JSON object with at least a prompt, e.g. {\"prompt\": \"a fox\"}",
                       code="invalid_body") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the JSON body must be an object, e.g. {\"prompt\": \"a fox\"}", code="invalid_body")
    return body
