"""A time limit on a request's headers (serve.header_timeout_s), which uvicorn does not have.

A client that sends its header lines one every few seconds holds its connection open for as long
as it likes; nothing in the app can see it (a request exists only once its headers are complete).
HeaderTimeoutProtocol is uvicorn's httptools protocol plus one timer: armed when a connection
opens and when a later request's first byte arrives, cancelled when its headers are complete.
When it fires, a connection that began a request gets 408 and is closed; one that never sent a
byte is closed. Between requests, uvicorn's keep-alive timeout (serve.keep_alive_timeout_s)
closes idle connections, as before.

Ray Serve's HTTP proxy builds its uvicorn server itself (ray 2.60 exposes only keep_alive_timeout_s
and request_timeout_s), but as its proxy starts it calls the function that the environment variable
RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names (made for middlewares). `install` is that function:
before the proxy's server loads its config, it points uvicorn's "auto" HTTP protocol at this one,
with the limit from PIPEDIT_HEADER_TIMEOUT_S, and adds no middleware. `pipedit serve` puts both
variables in the environment of the Ray instance it starts (`environment`); on a cluster started
elsewhere they must be in the cluster's environment.
Hazard: relies on uvicorn's HttpToolsProtocol callbacks (connection_made, on_message_begin,
on_headers_complete, connection_lost) and its HTTP_PROTOCOLS table (uvicorn 0.54);
tests/serve/test_hostile_input.py checks the limit on every test server, which uses this protocol.
"""

from __future__ import annotations

import json
import logging
import os

_log = logging.getLogger(__name__)

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
TIMEOUT_ENV = "PIPEDIT_HEADER_TIMEOUT_S"
_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
             b"content-length: %d\r\n\r\n%s")


def protocol_class(timeout_s: float):
    """uvicorn's httptools protocol with a header time limit of `timeout_s` seconds."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from .http_errors import header_timeout

    body = json.dumps(header_timeout(timeout_s).body()).encode()

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer, self._begun = None, False
            self._arm()

        def on_message_begin(self) -> None:
            self._begun = True
            if self._header_timer is None:  # a later request on a kept-alive connection
                self._arm()
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._begun = False
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self._begun:
                self.transport.write(_RESPONSE % (len(body), body))
            self.transport.close()

    return HeaderTimeoutProtocol


def environment(timeout_s: float) -> dict[str, str]:
    """The variables that make the Ray Serve proxies of a Ray instance started with them limit
    header time to `timeout_s` (see the module's doc)."""
    return {CALLBACK_ENV: f"{__name__}:install", TIMEOUT_ENV: repr(float(timeout_s))}


def install() -> list:
    """Ray Serve's proxy callback (in the proxy process, before its server starts): every uvicorn
    server this process loads from now on uses HeaderTimeoutProtocol. Returns no middleware."""
    import uvicorn.config

    try:
        timeout_s = float(os.environ.get(TIMEOUT_ENV, ""))
        protocol = protocol_class(timeout_s)
    except (ValueError, ImportError) as error:  # no limit rather than no proxy
        _log.warning("no header time limit in this proxy: %s", error)
        return []
    # uvicorn resolves "auto" (Ray's choice) through this table as its config loads.
    uvicorn.config.HTTP_PROTOCOLS["auto"] = f"{__name__}:_installed"
    globals()["_installed"] = protocol
    return []
