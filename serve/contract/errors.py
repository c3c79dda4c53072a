"""The one error type the HTTP layer turns into an OpenAI-style error body."""

from __future__ import annotations


class ApiError(Exception):
    """An error for the client: HTTP status, a message that says the fix, and the parameter at fault.

    `type` follows OpenAI's vocabulary (invalid_request_error, authentication_error, ...);
    `headers` carries hints such as Retry-After.
    """

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def not_found(video_id: str) -> ApiError:
    return ApiError(404, f"no video with id '{video_id}': list them with GET /v1/videos",
                    param="video_id", code="video_not_found")


FULL_RETRY_AFTER_S = 60  # a full disk needs an operator: ask again in a minute


def storage_full(why: str, method: str = "POST") -> ApiError:
    """507 storage_full: the job store or the videos' disk has no room, for the request's `method`
    (a create: nothing was stored; a DELETE: the job was not deleted)."""
    if method.upper() == "DELETE":
        what = (f"the server cannot record the delete: {why}; the job was not deleted (its row and video are as "
                f"they were; a job running here was asked to stop)")
    elif method.upper() == "POST":
        what = f"the server has no room to store a job: {why}; nothing was stored"
    else:
        what = f"the server's job store has no room: {why}; nothing was changed"
    return ApiError(507, f"{what}: retry in {FULL_RETRY_AFTER_S} s (the Retry-After header), once space is freed",
                    type="server_error", code="storage_full", headers={"Retry-After": str(FULL_RETRY_AFTER_S)})
