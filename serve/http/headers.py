"""Headers every answer carries, the page's and the API's alike (errors and refusals included):
no other site may frame the page (its Generate and Cancel buttons would be clickjackable), no
script or style comes from elsewhere, and no answer is sniffed as another content type. And the
optional Swagger UI at /docs (serve.docs): off by default, since its script comes from a CDN,
on the origin where the page keeps the API key."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The page (http/static) loads only its own files; picked images and keyed downloads play as blob:
# URLs. frame-ancestors 'none' and X-Frame-Options DENY (older browsers) forbid framing it.
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
               "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
               "form-action 'self'; frame-ancestors 'none'")
# Swagger UI, pinned to one version of its distribution, when an operator turns /docs on.
SWAGGER_UI = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.17.14"
DOCS_PATH = "/docs"
DOCS_POLICY = (f"default-src 'self'; script-src 'self' 'unsafe-inline' {SWAGGER_UI}/; style-src 'self' "
               f"{SWAGGER_UI}/; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
               f"frame-ancestors 'none'")
_FIXED = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
          (b"referrer-policy", b"no-referrer"))


class SecurityHeaders:
    """Pure ASGI middleware: adds the headers above to every response that does not set its own.
    `docs`: whether /docs serves Swagger UI (its page alone gets DOCS_POLICY)."""

    def __init__(self, app: ASGIApp, docs: bool = False):
        self.app, self.docs = app, docs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = (DOCS_POLICY if self.docs and scope["path"] == DOCS_PATH else PAGE_POLICY).encode()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in [(b"content-security-policy", policy), *_FIXED]
                            if name not in present]
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def add_docs(app: FastAPI) -> None:
    """Swagger UI at /docs over /openapi.json (which is always served), its files from SWAGGER_UI."""

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs():
        return get_swagger_ui_html(openapi_url=app.openapi_url, title="pipedit API",
                                   swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css", swagger_favicon_url="")
