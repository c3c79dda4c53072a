"""/v1/videos/{id}/events: one watcher per replica fans out to every stream (store reads do not grow
with the streams, /healthz stays quick), caps per key and in total (429 too_many_streams), a
maximum lifetime, and the stream's semantics (deleted -> event: error, final status -> end).
The HTTP layer over an engine that runs nothing: jobs stay queued."""

import asyncio
import json
import threading
import time
import urllib.request
from types import SimpleNamespace

import aiohttp
import pytest

from pipedit.config import GenerationDefaults
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.events import EventHub
from pipedit.serve.http.errors import bearer_token
from pipedit.serve.jobs.service import JobService
from pipedit.serve.jobs.store import JobStore
from serve_helpers import SMALL, IdleEngine, call, serve_in_thread, wait_for

KEYS = ("key-a", "key-b", "key-c")
STREAMS = 200


@pytest.fixture
def serve_streams(tmp_path):
    """open_(api_keys=(), **hub options) -> (url, service, hub): a server whose event hub has the
    given limits."""
    opened = []

    def open_(api_keys=(), **options):
        service = JobService(IdleEngine(), JobStore.in_folder(tmp_path / str(len(opened))), tmp_path, "demo",
                             GenerationDefaults(64, 64, 5, 2))
        hub = service.events = EventHub.for_service(service, **options)
        url, stop = serve_in_thread(build_app(service, api_keys))
        opened.append((service, stop))
        return url, service, hub

    yield open_
    for service, stop in opened:
        stop()
        service.close()
        service.store.close()


def _create(url, key=None):
    reply = call("POST", f"{url}/v1/videos", {"prompt": "a fox", **SMALL}, headers=_auth(key))
    assert reply.status == 200, reply.body
    return reply.json()["id"]


def _auth(key):
    return {"Authorization": f"Bearer {key}"} if key else {}


def _open(url, video_id, key=None):
    """An open stream (its first event read), or the error reply."""
    request = urllib.request.Request(f"{url}/v1/videos/{video_id}/events", headers=_auth(key))
    stream = urllib.request.urlopen(request, timeout=30)
    assert stream.headers["content-type"].startswith("text/event-stream")
    first = stream.readline()
    assert first.startswith(b"data: "), first
    assert json.loads(first[6:])["id"] == video_id
    return stream


def _lines(stream, limit_s=30):
    deadline, lines = time.monotonic() + limit_s, []
    for line in stream:
        assert time.monotonic() < deadline
        lines.append(line.decode().rstrip("\n"))
    return lines


def test_the_stream_key_is_the_bearer_token():
    assert bearer_token({"authorization": "Bearer abc"}) == "abc"
    assert bearer_token({"authorization": "bearer  abc "}) == "abc"
    assert bearer_token({"authorization": "Basic abc"}) is None
    assert bearer_token({}) is None


def test_streams_are_capped_per_key_and_in_total(serve_streams):
    url, _service, hub = serve_streams(api_keys=KEYS, max_streams=3, max_streams_per_key=2)
    video_id = _create(url, "key-a")
    a1, a2 = _open(url, video_id, "key-a"), _open(url, video_id, "key-a")

    refused = call("GET", f"{url}/v1/videos/{video_id}/events", headers=_auth("key-a"))
    assert refused.status == 429
    error = refused.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "too_many_streams" and "serve.max_event_streams_per_key" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 30

    b1 = _open(url, _create(url, "key-b"), "key-b")  # another key still gets one: the server has 3
    theirs = _create(url, "key-c")
    refused = call("GET", f"{url}/v1/videos/{theirs}/events", headers=_auth("key-c"))
    assert refused.status == 429
    error = refused.json()["error"]
    assert error["code"] == "too_many_streams" and "(the limit is 3, serve.max_event_streams)" in error["message"]
    assert "serve.max_event_streams_per_key" not in error["message"]
    assert int(refused.headers["retry-after"]) >= 1

    a1.close()  # a client that leaves frees its slot at once (not at its next keep-alive)
    wait_for(lambda: hub.open_streams == 2, timeout=10)
    c1 = _open(url, theirs, "key-c")
    for stream in (a2, b1, c1):
        stream.close()
    wait_for(lambda: hub.open_streams == 0 and not hub.watching, timeout=10)


def test_many_streams_share_one_watcher_and_healthz_stays_quick(serve_streams):
    """200 streams on two queued jobs: the store reads per second stay those of one stream (the
    watcher reads each watched job once per tick); /healthz and the API answer within 1 s."""
    url, service, hub = serve_streams(max_streams=500, max_streams_per_key=2)  # keyless: no per-key cap
    jobs = [_create(url), _create(url)]
    reads, lock = [0], threading.Lock()
    store_get = service.store.get

    def counted_get(video_id):
        with lock:
            reads[0] += 1
        return store_get(video_id)

    service.store.get = counted_get

    def reads_per_s(window=2.0):
        with lock:
            before = reads[0]
        time.sleep(window)
        with lock:
            return (reads[0] - before) / window

    async def run():
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            async def open_stream(video_id):
                response = await session.get(f"{url}/v1/videos/{video_id}/events")
                assert response.status == 200, await response.text()
                line = await response.content.readline()
                assert json.loads(line[6:])["status"] == "queued"
                return response

            async def timed(path):
                started = time.monotonic()
                async with session.get(f"{url}{path}") as response:
                    assert response.status == 200
                    await response.read()
                return time.monotonic() - started

            loop = asyncio.get_running_loop()
            first = [await open_stream(jobs[0]), await open_stream(jobs[1])]
            few = await loop.run_in_executor(None, reads_per_s)
            streams = first + list(await asyncio.gather(*(open_stream(jobs[i % 2]) for i in range(STREAMS - 2))))
            assert hub.open_streams == STREAMS and hub.watching
            many = await loop.run_in_executor(None, reads_per_s)
            latencies = [await timed("/healthz") for _ in range(5)]
            latencies.append(await timed(f"/v1/videos/{jobs[0]}"))
            latencies.append(await timed("/v1/videos"))

            # A change reaches every stream once; a final status ends them all.
            service.store.update(jobs[0], status="in_progress", progress=40, extras={"stage": "denoising"})
            service.store.update(jobs[1], status="completed", progress=100, extras={"stage": "done"})

            async def rest(response):
                return [line.decode().strip() async for line in response.content if line.strip()]

            tails = await asyncio.gather(*(rest(s) for s in streams[1::2]))
            for response in streams[0::2]:
                line = b"\n"
                while not line.strip():  # the blank line that ends the first event, then the next
                    line = await response.content.readline()
                assert json.loads(line[6:])["progress"] == 40
                response.close()
            return few, many, latencies, tails

    few, many, latencies, tails = asyncio.run(run())
    print(f"store reads/s: {few:.1f} with 2 streams, {many:.1f} with {STREAMS}; slowest answer {max(latencies):.3f} s")
    # One tick reads each watched job once (POLL_S = 0.15 s: about 13 reads/s for two jobs);
    # a read per stream every 100 ms, as before, would be 2000/s.
    assert many <= max(2 * few, 30), (few, many)
    assert hub.reads > 0
    assert max(latencies) < 1.0, latencies
    for tail in tails:  # the final Video, then the end
        # A watcher tick between the two updates above sends job 2's new queue_position (job 1 left
        # the queue) first: a real change, still queued.
        *moved, final = [json.loads(line[6:]) for line in tail]
        assert final["status"] == "completed", tail
        assert [(v["status"], v["queue_position"]) for v in moved] in ([], [("queued", 0)]), tail
    wait_for(lambda: hub.open_streams == 0 and not hub.watching, timeout=10)
    before = hub.reads
    time.sleep(0.5)
    assert hub.reads == before  # no stream, no watcher, no reads


def test_a_stream_ends_after_its_maximum_lifetime(serve_streams):
    url, _service, hub = serve_streams(max_s=1.5, keepalive_s=0.5)
    video_id = _create(url)
    started = time.monotonic()
    stream = _open(url, video_id)
    lines = [line for line in _lines(stream) if line]
    assert 1.2 < time.monotonic() - started < 10
    assert ": keep-alive" in lines  # quiet stream: comments keep proxies from dropping it
    assert lines[-1].startswith(": reconnect") and "serve.event_stream_max_s" in lines[-1]
    wait_for(lambda: hub.open_streams == 0, timeout=10)
    again = _open(url, video_id)  # the client reconnects and carries on
    again.close()


def test_a_deleted_job_ends_its_streams_with_an_error_event(serve_streams):
    url, _service, _hub = serve_streams()
    video_id = _create(url)
    streams = [_open(url, video_id) for _ in range(3)]
    assert call("DELETE", f"{url}/v1/videos/{video_id}").status == 200
    for stream in streams:
        lines = [line for line in _lines(stream) if line and not line.startswith(":")]
        assert lines[0] == "event: error"
        assert json.loads(lines[1][6:])["error"]["code"] == "video_not_found"
    assert call("GET", f"{url}/v1/videos/{video_id}/events").status == 404


def test_the_default_hub_takes_servecfg_limits(tmp_path):
    service = JobService(IdleEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo", GenerationDefaults(64, 64, 5, 2))
    try:
        hub = service.events
        assert (hub.max_streams, hub.max_streams_per_key, hub.max_s) == (128, 8, 300.0)
    finally:
        service.close()
        service.store.close()


def test_engine_events_of_a_watched_job_wake_the_watcher():
    """The replica's own job updates reach the streams before the next tick; the watcher stops
    listening to the engine when its last stream closes."""
    state = {"progress": 0}
    listeners = []

    def read(video_id):
        return _video(video_id, state["progress"])

    def add_listener(callback):
        listeners.append(callback)
        return lambda: listeners.remove(callback)

    async def run():
        hub = EventHub(read, poll_s=30, min_gap_s=0.05, add_listener=add_listener)
        sub = hub.subscribe("video_1")
        stream = hub.events(sub)
        assert json.loads((await anext(stream))[6:])["progress"] == 0  # read at once, not after 30 s
        assert len(listeners) == 1
        state["progress"] = 50
        started = time.monotonic()
        threading.Thread(target=listeners[0], args=(SimpleNamespace(request_id="video_1"),)).start()
        assert json.loads((await anext(stream))[6:])["progress"] == 50
        woke_in = time.monotonic() - started
        await stream.aclose()
        await asyncio.sleep(0.2)
        return hub, woke_in

    hub, woke_in = asyncio.run(run())
    assert woke_in < 5, woke_in
    assert listeners == [] and not hub.watching and hub.open_streams == 0


def _video(video_id, progress):
    from pipedit.serve.contract.schemas import Video

    return Video.model_validate({
        "id": video_id, "model": "demo", "status": "in_progress", "progress": progress, "created_at": 0,
        "completed_at": None, "expires_at": None, "prompt": "a fox", "size": "64x64", "seconds": "1",
        "error": None, "pipedit": {"stage": "denoising", "step": 0, "total_steps": 2, "queue_position": None,
                                   "seed": 1, "num_frames": 5, "fps": 8, "num_inference_steps": 2,
                                   "guidance_scale": 1.0, "timings": {}}})
