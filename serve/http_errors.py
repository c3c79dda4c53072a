"""Every error leaves the server as OpenAI's body, {"error": {message, type, param, code}}:
the service's ApiError, FastAPI's validation errors, unknown routes and crashes alike."""

from __future__ import annotations

import hmac
import logging

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import ApiError

_log = logging.getLogger(__name__)
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
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

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
        return JSONResponse(body.body(), status_code=500)


def bearer_check(api_keys: tuple[str, ...]):
    """A dependency that admits a request only with `Authorization: Bearer <one of api_keys>`;
    it admits every request when no keys are configured."""
    scheme = HTTPBearer(auto_error=False, description="An API key of this server, when it has any.")
    keys = tuple(k.encode() for k in api_keys)

    async def check(credentials: HTTPAuthorizationCredentials | None = Depends(scheme)) -> None:
        if not keys:
            return
        given = credentials.credentials.encode() if credentials is not None else b""
        # compare_digest against every key: the time taken says nothing about which key is near.
        if not any([hmac.compare_digest(given, key) for key in keys]):
            reason = "missing" if credentials is None else "not valid"
            raise ApiError(401, f"API key {reason}: send the header 'Authorization: Bearer <key>'",
                           type="authentication_error", code="invalid_api_key")

    return check

