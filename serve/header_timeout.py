"""How Ray Serve's HTTP proxies get the header limits (serve.header_timeout_s, serve.max_header_bytes,
serve.max_header_lines; the protocol itself: pipedit.serve.http.header_timeout). This module's path is public: operators of a cluster
started elsewhere name `pipedit.serve.header_timeout:install` in its environment (docs/serving.md).

Ray Serve's HTTP proxy builds its uvicorn server itself (ray 2.60 exposes only keep_alive_timeout_s
and request_timeout_s), but as its proxy starts it calls the function that the environment variable
RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names (made for middlewares). `install` is that function:
before the proxy's server loads its config, it points uvicorn's "auto" HTTP protocol at the one
with the limits from PIPEDIT_HEADER_TIMEOUT_S, PIPEDIT_MAX_HEADER_BYTES and PIPEDIT_MAX_HEADER_LINES
(the last two default to ServeConfig's when unset; pipedit.compat.use_http_protocol), and adds no
middleware. `pipedit serve` puts these variables in the environment of the Ray instance it starts
(`environment`); on a cluster started elsewhere they must be in the cluster's environment.
"""

from __future__ import annotations

import logging
import os

from pipedit.compat import check_http_protocol_table, use_http_protocol

from .http.body_caps import BodyCaps
from .http.header_timeout import MAX_HEADER_BYTES, MAX_HEADER_LINES, protocol_class

_log = logging.getLogger(__name__)

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
TIMEOUT_ENV = "PIPEDIT_HEADER_TIMEOUT_S"
MAX_BYTES_ENV = "PIPEDIT_MAX_HEADER_BYTES"
MAX_LINES_ENV = "PIPEDIT_MAX_HEADER_LINES"
# The body caps (serve.max_body_bytes, serve.max_upload_bytes) for `Expect: 100-continue` requests;
# unset: the proxy leaves those to the app (which answers after uvicorn has invited the body).
MAX_BODY_ENV = "PIPEDIT_MAX_BODY_BYTES"
MAX_UPLOAD_ENV = "PIPEDIT_MAX_UPLOAD_BYTES"


def environment(timeout_s: float, max_bytes: int = MAX_HEADER_BYTES, max_lines: int = MAX_HEADER_LINES,
                body_caps: BodyCaps | None = None) -> dict[str, str]:
    """The variables that make the Ray Serve proxies of a Ray instance started with them limit
    header time to `timeout_s` and header size to `max_bytes` in `max_lines` lines, and refuse an
    `Expect: 100-continue` body over `body_caps` before inviting it (see the module's doc). Raises
    pipedit.compat.IncompatibleDependency here, before any Ray starts, when this uvicorn's protocol
    table would not take the protocol."""
    check_http_protocol_table()
    variables = {CALLBACK_ENV: f"{__name__}:install", TIMEOUT_ENV: repr(float(timeout_s)),
                 MAX_BYTES_ENV: str(int(max_bytes)), MAX_LINES_ENV: str(int(max_lines))}
    if body_caps is not None:
        variables.update({MAX_BODY_ENV: str(int(body_caps.max_body_bytes)),
                          MAX_UPLOAD_ENV: str(int(body_caps.max_upload_bytes))})
    return variables


def _body_caps() -> BodyCaps | None:
    body, upload = os.environ.get(MAX_BODY_ENV), os.environ.get(MAX_UPLOAD_ENV)
    return BodyCaps(int(body), int(upload)) if body and upload else None


def install() -> list:
    """Ray Serve's proxy callback (in the proxy process, before its server starts): every uvicorn
    server this process loads from now on uses the protocol with the limit. Returns no middleware."""
    try:
        protocol = protocol_class(float(os.environ.get(TIMEOUT_ENV, "")),
                                  int(os.environ.get(MAX_BYTES_ENV) or MAX_HEADER_BYTES),
                                  int(os.environ.get(MAX_LINES_ENV) or MAX_HEADER_LINES), _body_caps())
    except (ValueError, ImportError) as error:  # no limit rather than no proxy
        _log.warning("no header time limit in this proxy: %s", error)
        return []
    use_http_protocol(protocol)
    return []
