"""Limits on a request's headers that uvicorn does not have: a time limit (serve.header_timeout_s)
and a size limit (serve.max_header_bytes, serve.max_header_lines).

Time: a client that sends its header lines one every few seconds holds its connection open for as
long as it likes; nothing in the app can see it (a request exists only once its headers are
complete). HeaderTimeoutProtocol is uvicorn's httptools protocol plus one timer: armed when a
connection opens and when a later request's first byte arrives, cancelled when its headers are
complete. When it fires, a connection that began a request gets 408 and is closed; one that never
sent a byte is closed. Between requests, uvicorn's keep-alive timeout (serve.keep_alive_timeout_s)
closes idle connections, as before. A request pipelined behind one still running is not run: that
one's answer closes the connection (see on_headers_complete).

Size: httptools hands a header to uvicorn only once its value is complete, and keeps every byte of
it until then (uvicorn then keeps the whole list), so a flood of header lines of 64 KB each grew
Serve's proxy by hundreds of MB. The protocol counts the bytes that arrive while a request's headers
are incomplete, as they arrive (data_received, after each chunk is parsed), and the header lines
(on_header): past either cap the request gets 431 headers_too_large, nothing more is parsed, what
the client still sends is read and dropped for at most LINGER_S (so it can read the answer), and
the connection closes. A connection keeps at most the cap plus one read's chunk.

How Ray Serve's proxies come to run it: pipedit.serve.header_timeout.
Hazard: relies on uvicorn's HttpToolsProtocol callbacks (pipedit.compat.httptools_protocol checks
that they exist) and its `cycle` and `pipeline` attributes (uvicorn 0.54); tests/serve/test_hostile_input.py
and tests/serve/test_header_limits.py check the limits on every test server, which uses this protocol,
and tests/serve/test_http_edges.py the pipelining.
"""

from __future__ import annotations

import json
from http import HTTPStatus

import httptools

from pipedit.compat import httptools_protocol
from pipedit.config import ServeConfig

from ..contract.errors import ApiError
from .body_caps import BodyCaps
from .errors import header_timeout, headers_too_large

_RESPONSE = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
MAX_HEADER_BYTES = ServeConfig.max_header_bytes
MAX_HEADER_LINES = ServeConfig.max_header_lines
LINGER_S = 2.0  # after a 431: how long what the client still sends is read and dropped


def protocol_class(timeout_s: float, max_bytes: int = MAX_HEADER_BYTES, max_lines: int = MAX_HEADER_LINES,
                   body_caps: BodyCaps | None = None):
    """uvicorn's httptools protocol with a header time limit of `timeout_s` seconds, and at most
    `max_bytes` bytes (request line and headers) in at most `max_lines` header lines. With
    `body_caps`, a request that says `Expect: 100-continue` with a Content-Length over its cap is
    answered here (413 body_too_large, or 400 for a Content-Length that is no number), before
    anything reads its body: uvicorn would invite the body (100 Continue) at the first read, and
    Serve's proxy reads every body at once."""
    late = json.dumps(header_timeout(timeout_s).body()).encode()

    class HeaderTimeoutProtocol(httptools_protocol()):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer, self._begun, self._refused = None, False, False
            self._head_bytes = self._head_lines = 0
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused:  # read and dropped: never parsed, never kept
                return
            super().data_received(data)
            if self._begun and not self._refused:  # the chunk ended inside a request's headers
                self._head_bytes += len(data)
                if self._head_bytes > max_bytes:
                    self._refuse()

        def on_message_begin(self) -> None:
            if self._refused:
                return
            self._begun, self._head_bytes, self._head_lines = True, 0, 0
            if self._header_timer is None:  # a later request on a kept-alive connection
                self._arm()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            if not self._refused:
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if self._refused:
                return
            self._head_lines += 1
            if self._head_lines > max_lines:
                self._refuse()
                return
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self._refused:  # no request for the app
                return
            self._begun = False
            self._disarm()
            if self.expect_100_continue and body_caps is not None:
                refusal = self._uninvited_body_refusal()
                if refusal is not None:
                    self._answer_and_close(refusal)
                    return
            running = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
            super().on_headers_complete()
            if running is not None and self.pipeline and self.pipeline[0][0] is self.cycle:
                # A pipelined request (sent before the answer to the one running): not run; the
                # running one's answer says Connection: close and the connection closes after it,
                # so the client knows to send the rest again. Behind Ray Serve's proxy only the
                # first of two pipelined requests was answered, the second left waiting.
                self.pipeline.popleft()
                running.keep_alive = False

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refused:
                super().on_message_complete()

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
                self.transport.write(_RESPONSE % (b"408 Request Timeout", len(late), late))
            self.transport.close()

        def _uninvited_body_refusal(self) -> ApiError | None:
            headers = {name: value.decode("latin-1") for name, value in self.headers}
            path = httptools.parse_url(self.url).path.decode("latin-1")
            cap = body_caps.cap(self.parser.get_method().decode("ascii"), path, headers.get(b"content-type"))
            return body_caps.length_refusal(headers.get(b"content-length"), cap)

        def _refuse(self) -> None:
            """431, then the client's further bytes are dropped for LINGER_S, then the connection closes."""
            self._answer_and_close(headers_too_large(max_bytes, max_lines))

        def _answer_and_close(self, error: ApiError) -> None:
            """`error` as the answer, then the client's further bytes are dropped for LINGER_S (so it
            can read the answer), then the connection closes. The app never sees the request."""
            self._refused, self._begun = True, False
            self._disarm()
            self.headers = []  # what uvicorn kept of this request's headers
            if self.transport.is_closing():
                return
            body = json.dumps(error.body()).encode()
            status = f"{error.status} {HTTPStatus(error.status).phrase}".encode()
            self.transport.write(_RESPONSE % (status, len(body), body))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

    return HeaderTimeoutProtocol
