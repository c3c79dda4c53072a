"""serve.http.body.BodyWatch without a socket: what an answer that begins before the body is complete
does (Connection: close, the rest read before the answer ends), and when it must not wait."""

import asyncio

import pytest
from starlette.datastructures import Headers

from pipedit.serve.http.body import BodyWatch
from pipedit.serve.contract.errors import ApiError


def _run(headers: dict, incoming: list[dict], app_reads: int = 0, timeout_s: float = 30.0):
    """Runs an app that reads `app_reads` messages, then answers 413; returns (what was sent,
    how many messages were taken from `incoming`)."""
    sent, taken = [], []

    async def receive():
        if not incoming:
            await asyncio.sleep(3600)
        taken.append(incoming.pop(0))
        return taken[-1]

    async def send(message):
        sent.append((message, len(taken)))

    async def main():
        watch = BodyWatch(receive, send, Headers(headers), cap=10, too_large=lambda: ApiError(413, "big"),
                          timeout_s=timeout_s, min_rate=1, timed_out=lambda: ApiError(408, "slow"), linger_s=5)
        for _ in range(app_reads):
            await watch.receive()
        await watch.send({"type": "http.response.start", "status": 413, "headers": [(b"connection", b"keep-alive")]})
        await watch.send({"type": "http.response.body", "body": b"no", "more_body": False})

    asyncio.run(main())
    return sent, len(taken)


def test_an_early_answer_closes_after_reading_the_rest_of_the_body():
    body = [{"type": "http.request", "body": b"x" * 4, "more_body": True}] * 3 + [
        {"type": "http.request", "body": b"", "more_body": False}]
    sent, taken = _run({"content-length": "12"}, list(body))
    start, whole, end = (message for message, _ in sent)
    assert dict(start["headers"])[b"connection"] == b"close" and len(start["headers"]) == 1
    assert whole == {"type": "http.response.body", "body": b"no", "more_body": True}  # the client can read it
    assert end["more_body"] is False and sent[-1][1] == 4 == taken  # ended once the body was all read


def test_no_wait_without_a_body_or_after_expect_100_continue():
    # No body: the answer is as the app made it. "Expect: 100-continue" and nothing sent yet: the
    # client sends no body after a final answer, so the connection closes at once.
    for headers, connection in (({}, b"keep-alive"), ({"content-length": "12", "expect": "100-continue"}, b"close")):
        sent, taken = _run(headers, [{"type": "http.request", "body": b"x", "more_body": True}])
        assert taken == 0 and [m.get("more_body", False) for m, _ in sent] == [False, False]
        assert dict(sent[0][0]["headers"])[b"connection"] == connection


def test_a_body_that_does_not_come_in_time_is_408():
    with pytest.raises(ApiError) as refused:
        _run({"content-length": "12"}, [], app_reads=1, timeout_s=0)
    assert refused.value.status == 408
