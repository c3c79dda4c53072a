"""Every error leaves the server as OpenAI's body, {"error": {message, type, param, code}}:
the service's ApiError, FastAPI's validation errors, unknown routes, a busy store and crashes
alike; plus who the caller is (API keys) and the checks every request passes before any route
runs (RequestGuard: Host names, cross-site requests, body size)."""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from ..contract.errors import ApiError, storage_full
from ..jobs.admission import EVERYONE, Caller, client_of
from ..jobs.store_locks import is_full
from .body import BodyWatch
from .body_caps import BodyCaps, too_large

_log = logging.getLogger(__name__)
BUSY_RETRY_AFTER_S = 2
# Lock and capacity errors of PostgreSQL (lock_not_available, query_canceled by lock/statement
# timeouts, serialization_failure, deadlock_detected, too_many_connections): the store is busy.
_BUSY_SQLSTATES = frozenset({"55P03", "57014", "40001", "40P01", "53300"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SafeJSONResponse(JSONResponse):
    """JSON whose text is always sendable: a string UTF-8 cannot carry (a lone surrogate)
    becomes '?' instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode("utf-8", "replace")
_LOCATIONS = ("body", "query", "path", "header")
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 415: "unsupported_media_type"}


def from_validation(errors: list[dict]) -> ApiError:
    """The first pydantic/FastAPI error as a 400 naming its parameter."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    names = [str(part) for part in first.get("loc", ()) if str(part) not in _LOCATIONS]
    param = ".".join(names) or None
    message = f"{param}: {first['msg']}" if param else first["msg"]
    if first.get("type") == "extra_forbidden":
        message = f"unknown parameter '{param}'; see /openapi.json for the accepted ones"
    return ApiError(400, message, param=param, code=first.get("type", "invalid_value"))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, error: ApiError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(DBAPIError)
    async def _store_error(request: Request, error: DBAPIError) -> JSONResponse:
        busy = store_busy(error, request.method)
        if busy is None:
            return await _crash(request, error)
        _log.warning("job store %s: %s", busy.code, error.orig)
        return error_response(busy)

    @app.exception_handler(RecursionError)
    async def _too_deep(_request: Request, _error: RecursionError) -> JSONResponse:
        return error_response(ApiError(400, "the request is nested too deeply to read; send a flat JSON object "
                                            "such as {\"prompt\": \"a fox\"}", code="invalid_body"))

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
        return await _api_error(_request, from_validation(list(error.errors())))

    @app.exception_handler(ValidationError)
    async def _model_invalid(_request: Request, error: ValidationError) -> JSONResponse:
        return await _api_error(_request, from_validation(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {error.detail}"
        if error.status_code == 404:
            message += "; the API lives under /v1/videos (see /openapi.json)"
        body = ApiError(error.status_code, message, code=_HTTP_CODES.get(error.status_code), param=None)
        return JSONResponse(body.body(), status_code=error.status_code, headers=getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(_request: Request, error: Exception) -> JSONResponse:
        _log.exception("unhandled error", exc_info=error)
        body = ApiError(500, "internal server error; the server log has the details", type="server_error",
                        code="internal_error")
        return SafeJSONResponse(body.body(), status_code=500)


def error_response(error: ApiError) -> JSONResponse:
    return SafeJSONResponse(error.body(), status_code=error.status, headers=error.headers)


def store_busy(error: DBAPIError, method: str = "POST") -> ApiError | None:
    """507 storage_full when the store's disk is full; 503 server_busy when the store's error is
    a lock or capacity wait that ran out (SQLite: another writer held the file past its wait,
    see store.StoreBusy); 503 store_unavailable when the connection
    to it was lost; None for other errors (bugs: 500)."""
    orig = error.orig
    text = str(orig).lower()
    sqlstate = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None), "sqlstate", None) or ""
    retry = {"Retry-After": str(BUSY_RETRY_AFTER_S)}
    if is_full(error):
        return storage_full(f"the job store's disk is full ({orig})", method)
    if "database is locked" in text or "database table is locked" in text or "database is busy" in text \
            or sqlstate in _BUSY_SQLSTATES:
        return ApiError(503, f"the job store is busy (another writer holds its lock); nothing was changed: "
                             f"retry in {BUSY_RETRY_AFTER_S} s (the Retry-After header)", type="server_error",
                        code="server_busy", headers=retry)
    if error.connection_invalidated or sqlstate.startswith("08"):
        return ApiError(503, f"the job store cannot be reached; retry in {BUSY_RETRY_AFTER_S} s "
                             f"(the Retry-After header)", type="server_error", code="store_unavailable",
                        headers=retry)
    return None


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The key of an `Authorization: Bearer <key>` header, None without one (bearer_check decides
    whether it is accepted)."""
    scheme, _, key = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return key.strip() or None


def bearer_check(api_keys: tuple[str, ...], admin_keys: tuple[str, ...] = ()):
    """A dependency that admits a request only with `Authorization: Bearer <one of api_keys>`
    and returns its Caller (client_of(key); admin for admin_keys); it admits every request, as
    an admin, when no keys are configured."""
    scheme = HTTPBearer(auto_error=False, description="An API key of this server, when it has any.")
    keys = tuple(k.encode() for k in api_keys)
    admins = tuple(k.encode() for k in admin_keys)

    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(scheme)) -> Caller:
        if not keys:
            return EVERYONE
        given = credentials.credentials.encode() if credentials is not None else b""
        # compare_digest against every key: the time taken says nothing about which key is near.
        if not any([hmac.compare_digest(given, key) for key in keys]):
            raise unauthorized(credentials is not None)
        admin = any([hmac.compare_digest(given, key) for key in admins])
        return Caller(client=client_of(credentials.credentials), admin=admin)

    return check


def unauthorized(key_given: bool) -> ApiError:
    """401 invalid_api_key, with the challenge RFC 6750 asks of a Bearer-protected route."""
    reason = "not valid" if key_given else "missing"
    challenge = 'Bearer realm="pipedit", error="invalid_token"' if key_given else 'Bearer realm="pipedit"'
    return ApiError(401, f"API key {reason}: send the header 'Authorization: Bearer <key>'",
                    type="authentication_error", code="invalid_api_key", headers={"WWW-Authenticate": challenge})


def header_timeout(timeout_s: float) -> ApiError:
    """408 header_timeout: the request's headers came too slowly (see header_timeout.py)."""
    return ApiError(408, f"the request headers did not arrive within {timeout_s:g} s (serve.header_timeout_s); "
                         f"send them at once", param=None, code="header_timeout")


def headers_too_large(max_bytes: int, max_lines: int) -> ApiError:
    """431 headers_too_large: the request's headers passed a cap (see header_timeout.py)."""
    return ApiError(431, f"the request headers are too large: at most {max_bytes:,} bytes "
                         f"(serve.max_header_bytes) in at most {max_lines} header lines (serve.max_header_lines)",
                    param=None, code="headers_too_large")


def body_timeout(timeout_s: float, min_rate: int, received: int) -> ApiError:
    """408 body_timeout: the body came too slowly (see body.py)."""
    return ApiError(408, f"the request body did not arrive in time: {received:,} bytes came within "
                         f"{timeout_s:g} s (serve.body_timeout_s) plus one second per {min_rate:,} bytes received "
                         f"(serve.body_min_rate); send the body as fast as the headers", param="body",
                    code="body_timeout")


def idempotency_key_reused(header: str, key: str, video_id: str) -> ApiError:
    """409: an Idempotency-Key sent again with another request (see idempotency.py)."""
    return ApiError(409, f"{header} {key!r} was used for video '{video_id}' with a different request: send a new "
                         f"key for a new request (a retry must repeat the first request as it was)",
                    param=header, code="idempotency_key_reused")


def unreadable_form(why: str) -> ApiError:
    """400 invalid_body: a multipart/form-data body that cannot be parsed (no boundary, a part without
    a name, bytes that are not multipart at all)."""
    return ApiError(400, f"the multipart/form-data body cannot be read ({why}); send fields as the openai SDK "
                         f"or curl -F does, e.g. curl -F prompt='a fox' -F input_reference=@first.png",
                    param="body", code="invalid_body")


def is_loopback(host: str | None) -> bool:
    """Whether a bind address is loopback only (127.0.0.0/8, ::1, localhost)."""
    if not host:
        return False
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# RFC 3986's host[:port] as a Host header may carry it: a bracketed IPv6 address, or dot-separated
# labels (a name or IPv4; '_' too, which some internal names use). Nothing else: no userinfo ('@'),
# no path, nothing after the brackets.
_HOST = re.compile(r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
                   r"(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*\.?)(?::(?P<port>[0-9]{1,5}))?")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """'Example.com:8000' -> ('example.com', 8000); '[::1]:80' -> ('[::1]', 80); port None if
    absent; None when `value` is not a host[:port] at all ('[::1].evil.example',
    'localhost:80@evil.example')."""
    match = _HOST.fullmatch(value.strip().lower())
    if match is None:
        return None
    return match["name"].rstrip("."), int(match["port"]) if match["port"] else None


class RequestGuard:
    """Pure ASGI middleware (streams pass through untouched); before any route runs it refuses:

    - a Host name other than loopback's (localhost, 127.0.0.1, [::1], any port) and
      serve.allowed_hosts, when the server is bound to loopback: DNS rebinding (400 host_not_allowed);
    - a state-changing request (POST, PUT, PATCH, DELETE) with `Sec-Fetch-Site: cross-site` or an
      Origin that is not this server's own (403 cross_site_request): another web page driving the
      API from the user's browser. Clients that are not browsers send neither header;
    - a body over max_body_bytes (413 body_too_large): at once by Content-Length, and for a chunked
      body as soon as what arrived passes the cap (nothing more is read). A multipart POST to an
      upload route (`upload_paths`: a create, which may carry an input_reference image) is capped
      at max_upload_bytes instead;
    - a body that does not arrive in time (408 body_timeout): `body_timeout_s` from the request's
      start plus a second per `body_min_rate` bytes received (see body.py).
    An answer that begins before the body is complete closes the connection after a read of what
    the client still sends, for at most `linger_s` (body.py), so the client can read it."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, loopback: bool, allowed_hosts: tuple[str, ...] = (),
                 max_upload_bytes: int | None = None, upload_paths: tuple[str, ...] = (),
                 body_timeout_s: float = 30.0, body_min_rate: int = 65536, linger_s: float = 5.0):
        self.app, self.loopback = app, loopback
        self.body_timeout_s, self.body_min_rate, self.linger_s = body_timeout_s, body_min_rate, linger_s
        self.caps = BodyCaps(max_body_bytes, max_body_bytes if max_upload_bytes is None else max_upload_bytes,
                             tuple(upload_paths))
        self.allowed = {(_split_host(h) or (h.strip().lower(), None))[0] for h in LOOPBACK_NAMES + tuple(allowed_hosts)}
        self.allowed_exact = {h.strip().lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        cap = self.caps.cap(scope["method"], scope["path"], headers.get("content-type"))
        watch = BodyWatch(receive, send, headers, cap=cap[0], too_large=lambda: too_large(
                              f"passed {cap[0]:,} bytes before it ended", cap),
                          timeout_s=self.body_timeout_s, min_rate=self.body_min_rate, timed_out=lambda: body_timeout(
                              self.body_timeout_s, self.body_min_rate, watch.seen), linger_s=self.linger_s)
        refusal = (self._host_refusal(headers)
                   or self._cross_site_refusal(scope["method"], headers, scope.get("scheme", "http"))
                   or self.caps.length_refusal(headers.get("content-length"), cap))
        if refusal is not None:
            await error_response(refusal)(scope, watch.receive, watch.send)
            return
        await self.app(scope, watch.receive, watch.send)

    def _host_refusal(self, headers: Headers) -> ApiError | None:
        host = headers.get("host")
        if host is None:  # no Host (HTTP/1.0): nothing a browser could rebind
            return None
        if len(headers.getlist("host")) > 1:  # the first may pass while something downstream reads another
            return ApiError(400, "the request has several Host headers; send one", param="Host",
                            code="host_not_allowed")
        parsed = _split_host(host)
        if parsed is None:  # refused whatever the bind: no server name looks like this
            return ApiError(400, f"Host {host!r} is not a host name or address with an optional port (such as "
                                 f"localhost:8000 or [::1]:8000)", param="Host", code="host_not_allowed")
        if not self.loopback or parsed[0] in self.allowed or host.strip().lower() in self.allowed_exact:
            return None
        return ApiError(400, f"Host '{host}' is not accepted: this server listens on loopback and answers only to "
                             f"localhost, 127.0.0.1 and [::1] (any port) and the names in serve.allowed_hosts; "
                             f"add this name to serve.allowed_hosts to reach the server by it", param="Host",
                        code="host_not_allowed")

    def _cross_site_refusal(self, method: str, headers: Headers, scheme: str = "http") -> ApiError | None:
        """`scheme`: the request's (a TLS-terminating proxy in front says which in X-Forwarded-Proto)."""
        if method.upper() not in _UNSAFE_METHODS:
            return None
        scheme = (headers.get("x-forwarded-proto") or scheme).split(",")[0].strip().lower()
        origin, fetch_site = headers.get("origin"), (headers.get("sec-fetch-site") or "").strip().lower()
        if fetch_site == "cross-site":
            why = "the browser marks it cross-site (Sec-Fetch-Site: cross-site)"
        elif origin is not None and not _same_origin(origin, headers.get("host"), scheme):
            why = f"it comes from the web page of another origin ({origin!r})"
        else:
            return None
        return ApiError(403, f"{method} refused: {why}. This server takes POST and DELETE only from its own "
                             f"web page or from clients that send no Origin (curl, the OpenAI SDK, scripts)",
                        param="Origin", type="permission_error", code="cross_site_request")


def _same_origin(origin: str, host: str | None, scheme: str = "http") -> bool:
    """Whether a browser's Origin (scheme://host[:port]) names the server the request's Host names,
    reached by `scheme` (https://127.0.0.1:8000 is another origin than http://127.0.0.1:8000)."""
    if host is None:
        return False
    try:
        parts = urlsplit(origin.strip())
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme != scheme or not parts.hostname:
        return False  # "null" (sandboxed frames, file: pages), other schemes and the other of http/https
    default = 443 if parts.scheme == "https" else 80
    parsed = _split_host(host)
    if parsed is None:
        return False
    host_name, host_port = parsed
    origin_name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return origin_name.rstrip(".") == host_name and (origin_port or default) == (host_port or default)

