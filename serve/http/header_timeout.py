"""A time limit on a request's headers (serve.header_timeout_s), which uvicorn does not have.

A client that sends its header lines one every few seconds holds its connection open for as long
as it likes; nothing in the app can see it (a request exists only once its headers are complete).
HeaderTimeoutProtocol is uvicorn's httptools protocol plus one timer: armed when a connection
opens and when a later request's first byte arrives, cancelled when its headers are complete.
When it fires, a connection that began a request gets 408 and is closed; one that never sent a
byte is closed. Between requests, uvicorn's keep-alive timeout (serve.keep_alive_timeout_s)
closes idle connections, as before. A request pipelined behind one still running is not run: that
one's answer closes the connection (see on_headers_complete). How Ray Serve's proxies come to run
it: pipedit.serve.header_timeout.
Hazard: relies on uvicorn's HttpToolsProtocol callbacks (pipedit.compat.httptools_protocol checks
that they exist) and its `cycle` and `pipeline` attributes (uvicorn 0.54); tests/serve/test_hostile_input.py
checks the limit on every test server, which uses this protocol, and tests/serve/test_http_edges.py
the pipelining.
"""

from __future__ import annotations

import json

from pipedit.compat import httptools_protocol

from .errors import header_timeout

_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
             b"content-length: %d\r\n\r\n%s")


def protocol_class(timeout_s: float):
    """uvicorn's httptools protocol with a header time limit of `timeout_s` seconds."""
    body = json.dumps(header_timeout(timeout_s).body()).encode()

    class HeaderTimeoutProtocol(httptools_protocol()):
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
            running = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
            super().on_headers_complete()
            if running is not None and self.pipeline and self.pipeline[0][0] is self.cycle:
                # A pipelined request (sent before the answer to the one running): not run; the
                # running one's answer says Connection: close and the connection closes after it,
                # so the client knows to send the rest again. Behind Ray Serve's proxy only the
                # first of two pipelined requests was answered, the second left waiting.
                self.pipeline.popleft()
                running.keep_alive = False

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
