"""The /healthz front (serve/health_front.py) without Serve: its answer from a replica's health and
Serve's replica count, the deadline on a replica that does not answer, and its HTTP face (the
API's Host guard, headers and 503 body). On a cluster: tests/cluster/test_replicas_on_nodes.py."""

import asyncio
import time
from types import SimpleNamespace

from fastapi.testclient import TestClient

from pipedit.config import EngineConfig, ServeConfig
from pipedit.serve.ray_app.health_front import COUNT_EVERY_S, REPLICA_DEADLINE_S, HealthFront, ReplicaCount, front_answer


def test_the_answer_from_a_replica_and_the_count():
    assert front_answer(("ok", None), 2, 2) == ("ok", None)
    assert front_answer(("degraded", "rebuilding"), 2, 2) == ("degraded", "rebuilding")
    assert front_answer(("down", "stopping"), 1, 2) == ("down", "stopping")
    status, reason = front_answer(("ok", None), 1, 2)
    assert status == "degraded" and reason.startswith("1 of 2 replicas running")
    assert front_answer(("ok", None), None, 2) == ("ok", None)  # Serve cannot say: the replica's word
    assert front_answer(None, 2, 2) == ("degraded", f"no replica answered within {REPLICA_DEADLINE_S:g} s (2 running)")
    assert front_answer(None, None, 2)[0] == "degraded"
    status, reason = front_answer(None, 0, 2)
    assert status == "down" and "no replica is running (0 of 2" in reason


class _Replicas:
    """A deployment handle whose replicas answer `answers` in turn: a tuple, an exception to
    raise, or None (never answers)."""

    def __init__(self, *answers):
        self.answers, self.cancelled = list(answers), 0
        self.health = SimpleNamespace(remote=self._remote)

    def _remote(self):
        answer = self.answers.pop(0)
        replicas = self

        class Response:
            def __await__(self):
                if answer is None:
                    yield from asyncio.sleep(3600).__await__()
                if isinstance(answer, Exception):
                    raise answer
                return answer

            def cancel(self):
                replicas.cancelled += 1

        return Response()


def _front(replicas, running, **serve):
    """A HealthFront over `replicas` whose Serve reports `running[0]` replicas running."""
    front = SimpleNamespace(config=EngineConfig(serve=ServeConfig(num_replicas=2, **serve)), replicas=replicas,
                            count=ReplicaCount(lambda: running[0]))
    front.answer = lambda: HealthFront.answer(front)
    return front


def test_a_replica_that_does_not_answer_meets_the_deadline():
    replicas = _Replicas(None)
    started = time.monotonic()
    answer = asyncio.run(_front(replicas, [2]).answer())
    assert time.monotonic() - started < REPLICA_DEADLINE_S + 0.4
    assert answer[0] == "degraded" and replicas.cancelled == 1
    replicas = _Replicas(RuntimeError("the replica's actor died"), ("ok", None))  # the second is asked
    assert asyncio.run(_front(replicas, [2]).answer()) == ("ok", None)


def test_the_count_is_read_at_the_first_probe_then_in_the_background():
    running = [0]
    front = _front(_Replicas(*[("ok", None)] * 3), running)

    async def probes():
        first = await front.answer()
        running[0] = 2
        second = await front.answer()  # the count read at the first probe, not yet again
        await asyncio.sleep(COUNT_EVERY_S + 0.3)
        return first, second, await front.answer()

    first, second, third = asyncio.run(probes())
    assert first[0] == second[0] == "degraded" and first[1].startswith("0 of 2 replicas running")
    assert third == ("ok", None)


def test_the_http_face_is_the_apis():
    running = [2]
    front = _front(_Replicas(("ok", None), RuntimeError("gone"), RuntimeError("gone")), running)
    front.count.reader = "read elsewhere"  # each answer takes the count as it is now
    front.count.running = 2
    client = TestClient(HealthFront.__serve_build_asgi_app__(front), root_path="/healthz", base_url="http://127.0.0.1")
    reply = client.get("/healthz")
    assert reply.status_code == 200 and reply.json() == {"status": "ok"}
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    front.count.running = 0
    reply = client.get("/healthz")
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "engine_unavailable"
    assert "no replica is running" in reply.json()["error"]["message"]
    refused = client.get("/healthz", headers={"Host": "rebinding.example"})  # bound to loopback
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "host_not_allowed"


def test_a_server_on_every_address_answers_any_host():
    front = _front(_Replicas(("ok", None)), [2], host="0.0.0.0")
    client = TestClient(HealthFront.__serve_build_asgi_app__(front), root_path="/healthz", base_url="http://127.0.0.1")
    assert client.get("/healthz", headers={"Host": "videos.example"}).status_code == 200


def test_a_replicas_health_does_not_wait_for_the_thread_pool_that_streams_fill():
    # The review: /healthz took 5.7 s with 300 event streams opened at once. Each stream's accept
    # runs a sync route and dependency in the replica's thread pool, where Ray Serve 2.60 also runs a
    # replica's plain (sync) methods; a coroutine method runs on the replica's event loop. Here: the
    # pool full of blocked calls, the front's question (health) and Serve's (check_health) still
    # answer at once.
    import inspect
    import threading

    import anyio
    from anyio import to_thread

    from pipedit.serve.ray_app.deployment import PipeditServer

    replica = SimpleNamespace(service=SimpleNamespace(health=lambda: ("ok", None), unfit=lambda: None))
    release = threading.Event()

    async def as_serve_calls(method):  # ray/serve/_private/replica.py: coroutines awaited, others in the pool
        if inspect.iscoroutinefunction(method):
            return await method(replica)
        return await to_thread.run_sync(method, replica)

    async def probe():
        to_thread.current_default_thread_limiter().total_tokens = 4
        try:
            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(to_thread.run_sync, release.wait)
                await anyio.sleep(0.2)  # every thread of the pool is taken
                try:
                    with anyio.fail_after(2):
                        return await as_serve_calls(PipeditServer.health), await as_serve_calls(
                            PipeditServer.check_health)
                finally:
                    release.set()
        finally:
            release.set()

    assert anyio.run(probe) == (("ok", None), None)
