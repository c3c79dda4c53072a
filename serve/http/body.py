"""One request's body as the app reads it, and how its answer ends (RequestGuard uses one per request).

- Size: a body that passes its cap while it arrives (a chunked one) is refused at once (413).
- Time: a client that trickles its body (one byte every few seconds) would hold one of the
  replica's request slots for as long as it likes. The body must arrive within `timeout_s` of the
  request's start, plus one second for every `min_rate` bytes received (a large upload over a slow
  link keeps going; a trickle does not): then 408. Only the body is timed: once it is complete,
  receive is the app's again (an event stream waits on it for the client's disconnect).
- An answer sent while the client is still sending (a 413 from Content-Length, a 429 before an
  upload is read): closing a socket with unread data makes the kernel reset it, and the client's
  read of the answer then fails with "connection reset" (the openai SDK retries the upload). Such
  an answer says `Connection: close`, and before its end the rest of the body is read and dropped
  for at most `linger_s` seconds, so the client finishes sending and reads the answer; then the
  connection closes. (A body that timed out is not waited for.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import Message, Receive, Send

from ..contract.errors import ApiError


class BodyWatch:
    def __init__(self, receive: Receive, send: Send, headers: Headers, *, cap: int, too_large: Callable[[], ApiError],
                 timeout_s: float, min_rate: int, timed_out: Callable[[], ApiError], linger_s: float):
        self._receive, self._send = receive, send
        self.cap, self.too_large, self.timed_out = cap, too_large, timed_out
        self.timeout_s, self.min_rate, self.linger_s = timeout_s, min_rate, linger_s
        length = headers.get("content-length")
        # No Content-Length (or 0) and no Transfer-Encoding: there is no body to wait for.
        self.complete = headers.get("transfer-encoding") is None and (length is None or length.strip() == "0")
        self.seen = 0
        # A client that asked "Expect: 100-continue" sends no body after a final answer: nothing to wait for.
        self.expects_continue = (headers.get("expect") or "").strip().lower() == "100-continue"
        self.received_any = False
        self.gave_up = False  # the body timed out: the answer does not wait for the rest
        self.closing = False  # the answer began before the body was complete
        self.started = asyncio.get_running_loop().time()

    def deadline(self) -> float:
        return self.started + self.timeout_s + self.seen / self.min_rate

    async def receive(self) -> Message:
        """The app's receive: the body within its cap and its time."""
        if self.complete:
            return await self._receive()
        try:
            message = await asyncio.wait_for(self._receive(), max(0.0, self.deadline() - asyncio.get_running_loop().time()))
        except asyncio.TimeoutError:
            self.gave_up = True
            raise self.timed_out() from None
        self._account(message)
        if self.seen > self.cap:  # a chunked body passed the cap: stop reading; the route answers 413
            raise self.too_large()
        return message

    async def send(self, message: Message) -> None:
        """The app's send: an answer that begins before the body is complete closes the connection,
        after a bounded read of what the client is still sending."""
        if message["type"] == "http.response.start" and not self.complete:
            self.closing = True
            headers = [(name, value) for name, value in message.get("headers", []) if name.lower() != b"connection"]
            message = dict(message, headers=headers + [(b"connection", b"close")])
        elif (message["type"] == "http.response.body" and self.closing and not message.get("more_body", False)
              and not self.complete and not self.gave_up and (self.received_any or not self.expects_continue)):
            await self._send(dict(message, more_body=True))  # the whole answer, for the client to read
            await self._linger()
            message = {"type": "http.response.body", "body": b"", "more_body": False}
        await self._send(message)

    def _account(self, message: Message) -> None:
        if message["type"] == "http.request":
            self.received_any = True
            self.seen += len(message.get("body", b""))
            self.complete = not message.get("more_body", False)
        elif message["type"] == "http.disconnect":
            self.complete = True

    async def _linger(self) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self.linger_s
        while not self.complete and (left := until - loop.time()) > 0:
            try:
                self._account(await asyncio.wait_for(self._receive(), left))
            except asyncio.TimeoutError:
                return
