"""What the store's faults look like from the API and to the engine: a row whose params is not
JSON reads as failed `unreadable_job` everywhere and can be deleted; of two DELETEs of one job
at once one answers 200 and the other 404; a locked SQLite store answers a create within about a
second, never stalls the engine's thread with progress writes, and never loses a final state."""

import sqlite3
import threading
import time

import pytest
from sqlalchemy import event

from pipedit.request import RequestEvent, RequestStatus
from pipedit.serve.http.errors import store_busy
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import REQUEST_WAIT_S, JobRecord, JobStore
from pipedit.serve.jobs.store_locks import StoreBusy
from idle_app import start_idle
from job_engines import GatedEngine, InstantEngine, service_on
from serve_helpers import call, wait_for

PARAMS = {"prompt": "a fox", "width": 64, "height": 64, "num_frames": 5, "fps": 24, "num_inference_steps": 2,
          "guidance_scale": 6.0, "seed": 1, "seconds": "0.208"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    running = start_idle(tmp_path_factory.mktemp("faults"), limits=ServiceLimits(max_queued=1000))
    yield running
    running.close()


def _error(reply, status, code):
    assert reply.status == status, reply.body
    assert reply.json()["error"]["code"] == code, reply.body
    return reply.json()["error"]


def _damage(store: JobStore, video_id: str, params_text: str) -> None:
    """What a manual edit or an old version leaves: params that are not a JSON object."""
    with sqlite3.connect(store.url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE jobs SET params = ? WHERE id = ?", (params_text, video_id))


@pytest.mark.parametrize("params_text", ["{not json", "[1, 2]"])
def test_a_row_whose_params_is_not_json_reads_as_failed_everywhere_and_can_be_deleted(app, params_text):
    video_id = f"video_{abs(hash(params_text)):x}"
    app.service.store.add(JobRecord(id=video_id, status="completed", created_at=time.time(), params=PARAMS,
                                    extras={"stage": "done"}, video_file=f"{video_id}.mp4"))
    (app.service.videos_dir / f"{video_id}.mp4").write_bytes(b"an mp4")
    _damage(app.service.store, video_id, params_text)
    listed = call("GET", f"{app.url}/v1/videos?limit=100")
    assert listed.status == 200, listed.body
    shown = next(v for v in listed.json()["data"] if v["id"] == video_id)
    assert shown["status"] == "failed" and shown["error"]["code"] == "unreadable_job", shown
    assert "params" in shown["error"]["message"] and "delete it" in shown["error"]["message"]
    got = call("GET", f"{app.url}/v1/videos/{video_id}")
    assert got.status == 200 and got.json()["error"]["code"] == "unreadable_job", got.body
    assert call("GET", f"{app.url}/v1/videos?limit=1&after={video_id}").status == 200  # as a page's anchor too
    _error(call("GET", f"{app.url}/v1/videos/{video_id}/content"), 404, "video_not_ready")
    deleted = call("DELETE", f"{app.url}/v1/videos/{video_id}")
    assert deleted.status == 200 and deleted.json()["id"] == video_id, deleted.body
    _error(call("GET", f"{app.url}/v1/videos/{video_id}"), 404, "video_not_found")
    assert not (app.service.videos_dir / f"{video_id}.mp4").exists()


def test_a_queued_row_whose_params_is_not_json_fails_at_its_claim(tmp_path):
    engine = InstantEngine()
    service = service_on(engine, tmp_path)
    try:
        # Added as cancelled (never claimed), then damaged and queued in one write: the dispatcher
        # already runs, and must never see the row before its params are damaged.
        service.store.add(JobRecord(id="video_bad", status="cancelled", created_at=time.time(), params=PARAMS))
        with sqlite3.connect(service.store.url.removeprefix("sqlite:///")) as conn:
            conn.execute("UPDATE jobs SET params = '{', status = 'queued' WHERE id = 'video_bad'")
        service.dispatcher.wake.set()
        def stored():
            with sqlite3.connect(tmp_path / "jobs.sqlite") as conn:
                return conn.execute("SELECT status, error FROM jobs WHERE id = 'video_bad'").fetchone()

        wait_for(lambda: stored()[0] != "queued", timeout=30)
        status, error = stored()
        assert status == "failed" and "unreadable_job" in error and engine.submitted == []
    finally:
        service.close()


def test_two_deletes_of_one_job_at_once_answer_200_then_404(app):
    video_id = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}).json()["id"]
    together = threading.Barrier(3, timeout=20)
    real = app.service.sweeper.delete_job

    def delete_job(job_id, **kwargs):  # all three requests have found the job before any removes it
        if job_id == video_id:
            together.wait()
        return real(job_id, **kwargs)

    app.service.sweeper.delete_job = delete_job
    replies = [None] * 3
    try:
        threads = [threading.Thread(target=lambda i=i: replies.__setitem__(
            i, call("DELETE", f"{app.url}/v1/videos/{video_id}"))) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        del app.service.sweeper.delete_job
    assert sorted(r.status for r in replies) == [200, 404, 404], [r.body for r in replies]
    for reply in replies:
        if reply.status == 404:
            _error(reply, 404, "video_not_found")


def test_a_locked_store_answers_a_create_within_about_a_second(tmp_path):
    app = start_idle(tmp_path)  # the default store: its background writes wait 5 s for a lock
    statements = []  # (thread, statement): the wait a create's insert was given
    event.listen(app.service.store._engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: statements.append((threading.get_ident(), statement)))
    holder = sqlite3.connect(tmp_path / "jobs.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's long write
        started = time.monotonic()
        reply = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"})
        answered = time.monotonic() - started
        error = _error(reply, 503, "server_busy")
        assert reply.headers["retry-after"] == "2" and "retry" in error["message"]
        insert = next(i for i, (_, statement) in enumerate(statements) if statement.startswith("INSERT INTO jobs"))
        waits = [s for thread, s in statements[:insert] if thread == statements[insert][0] and "busy_timeout" in s]
        # what is left of REQUEST_WAIT_S once this process's own writers let it in
        assert 0 < int(waits[-1].rpartition("=")[2]) <= REQUEST_WAIT_S * 1000 <= 1000, waits
        assert answered < 4.0  # about a second (it took 5 s and more before; generous for slow machines)
    finally:
        holder.close()
        app.close()


def test_this_servers_own_writes_delay_a_create_by_request_wait_s_at_most(tmp_path):
    store = JobStore.in_folder(tmp_path, request_wait_s=0.1)
    store._write.acquire()  # a background write of this process, waiting for the database
    try:
        with pytest.raises(StoreBusy) as caught:
            store.add(JobRecord(id="video_1", status="queued", created_at=1.0, params=PARAMS))
        assert store_busy(caught.value).code == "server_busy"
    finally:
        store._write.release()
    store.add(JobRecord(id="video_1", status="queued", created_at=1.0, params=PARAMS))


def test_a_locked_store_never_blocks_the_engine_and_keeps_final_states(tmp_path):
    engine = GatedEngine()
    service = service_on(engine, tmp_path)
    service.store.busy_timeout_s = 0.2  # background writes give up soon (5 s by default)
    holder = sqlite3.connect(tmp_path / "jobs.sqlite", isolation_level=None)
    try:
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: engine.submitted == [job.id], timeout=30)
        holder.execute("BEGIN IMMEDIATE")
        calls = []
        for name in ("get", "update_owned", "heartbeat"):
            real = getattr(service.store, name)
            setattr(service.store, name, lambda *a, _real=real, _name=name, **k: (
                calls.append((_name, threading.current_thread().name)), _real(*a, **k))[1])
        for step in range(1, 21):  # the engine's thread reports steps while the store is locked
            service.dispatcher.on_event(RequestEvent(job.id, RequestStatus.DENOISING, step=step, total_steps=20))
        assert not [c for c in calls if c[1] == threading.current_thread().name], calls
        engine.go.set()  # the outcome is in: its final state cannot be written yet
        wait_for(lambda: service.dispatcher.unrecorded_state(job.id) is not None, timeout=30)
        assert service.get(job.id).status == "completed"  # shown as it is meanwhile, and served
        assert service.content_path(job.id).stat().st_size > 0
        assert service.store.get(job.id).status in ("queued", "in_progress")  # not recorded yet
        holder.execute("ROLLBACK")  # the lock is released: the final state is recorded
        wait_for(lambda: service.store.get(job.id).status == "completed", timeout=30)
        assert service.dispatcher.unrecorded_state(job.id) is None and not service.dispatcher.holds(job.id)
        assert service.content_path(job.id).stat().st_size > 0
        assert sum(1 for name, _ in calls if name == "update_owned") < 20 + 5  # progress coalesced or dropped
    finally:
        holder.close()
        service.close()


def test_a_delete_waits_request_wait_s_for_a_lock_another_connection_holds(store_url):
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import DBAPIError

    store = JobStore(store_url, request_wait_s=0.3)
    store.add(JobRecord(id="video_1", status="queued", created_at=1.0, params=PARAMS))
    other = create_engine(store_url).connect()
    try:
        if store.dialect == "sqlite":
            other.exec_driver_sql("BEGIN IMMEDIATE")
        else:  # another replica's transaction holds the row
            other.begin()
            other.execute(text("SELECT id FROM jobs WHERE id = 'video_1' FOR UPDATE"))
        with pytest.raises(DBAPIError) as caught:
            store.delete("video_1", request=True)
        assert store_busy(caught.value).code == "server_busy", caught.value
    finally:
        other.rollback()
        other.close()
    assert store.delete("video_1", request=True) and store.get("video_1") is None
    store.close()
