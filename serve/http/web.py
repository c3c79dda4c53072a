"""The web page: GET / (a form, this browser's job queue, the finished videos), its static files
under /static, and GET /v1/pipedit/options (what the form offers). The page and the options stay
open like /healthz: they carry no job data, and the page asks for the API key itself."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from ..jobs.service import JobService

STATIC_DIR = Path(__file__).parent / "static"


def add_web_page(app: FastAPI, service: JobService, api_keys: tuple[str, ...]) -> None:
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html",
                            headers={"Cache-Control": "no-cache"})

    @app.get("/v1/pipedit/options", summary="The served model, its defaults and the values a request may use")
    def options() -> dict:
        return dict(service.options(), api_key_required=bool(api_keys))
