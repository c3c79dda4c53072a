"""How many body bytes a request may send, decided from its request line and headers alone.

Two places ask: the app's RequestGuard (errors.py), and the protocol Ray Serve's proxies run
(header_timeout.py) for a request that says `Expect: 100-continue`. The proxy must answer such a
request before the app does: Serve's proxy reads every body at once, and uvicorn invites the body
(100 Continue) at the first read, so a 413 from the app would come after the client was told to
send 2 MB. One set of rules, so that both refuse the same requests with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.errors import ApiError

UPLOAD_PATHS = ("/v1/videos",)  # a create, which may carry an input_reference image as a multipart part


@dataclass(frozen=True)
class BodyCaps:
    max_body_bytes: int  # serve.max_body_bytes
    max_upload_bytes: int  # serve.max_upload_bytes: a multipart POST to an upload path
    upload_paths: tuple[str, ...] = UPLOAD_PATHS

    def cap(self, method: str, path: str, content_type: str | None) -> tuple[int, str]:
        """The body cap of this request and what a 413 says about it (the setting, a hint)."""
        media = (content_type or "").partition(";")[0].strip().lower()
        upload = method.upper() == "POST" and any(
            path.rstrip("/").endswith(upload_path.rstrip("/")) for upload_path in self.upload_paths)
        if upload and media == "multipart/form-data":
            return self.max_upload_bytes, "(serve.max_upload_bytes)"
        hint = (f"; an input_reference image may come as a multipart/form-data file part, up to "
                f"{self.max_upload_bytes:,} bytes (serve.max_upload_bytes)") if upload else ""
        return self.max_body_bytes, f"(serve.max_body_bytes){hint}"

    def length_refusal(self, length: str | None, cap: tuple[int, str]) -> ApiError | None:
        """400 for a Content-Length that is not a number, 413 for one over `cap`; None: it passes."""
        if length is None:
            return None
        if not length.strip().isdigit():
            return ApiError(400, f"Content-Length must be a number of bytes, got {length!r}", param="Content-Length",
                            code="invalid_body")
        if int(length) > cap[0]:
            return too_large(f"has {int(length):,} bytes", cap)
        return None


def too_large(what: str, cap: tuple[int, str]) -> ApiError:
    limit, setting = cap
    return ApiError(413, f"the request body {what}; this server takes at most {limit:,} bytes {setting}",
                    param="body", code="body_too_large")
