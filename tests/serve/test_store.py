"""The durable job store (SQLite and PostgreSQL): pagination, updates, recovery queries, WAL, threads."""

import threading
import time

from sqlalchemy import text

from pipedit.serve.jobs.store import JobRecord, JobStore


def _store(url, n=5):
    store = JobStore(url)
    for i in range(n):
        store.add(JobRecord(id=f"video_{i}", status="queued", created_at=1000.0 + i, params={"i": i}))
    return store


def test_pages_follow_after_in_both_orders(store_url):
    store = _store(store_url)
    page, more = store.list(limit=2, order="asc")
    assert [r.id for r in page] == ["video_0", "video_1"] and more
    page, more = store.list(limit=2, order="asc", after="video_3")
    assert [r.id for r in page] == ["video_4"] and not more
    page, more = store.list(limit=3, order="desc", after="video_4")
    assert [r.id for r in page] == ["video_3", "video_2", "video_1"] and more


def test_updates_unfinished_positions_and_delete_survive_reopening(store_url):
    store = _store(store_url)
    assert store.update("video_0", status="completed", progress=100, video_file="video_0.mp4")
    assert store.update("video_1", status="in_progress", extras={"stage": "denoising", "step": 3})
    assert not store.update("video_missing", status="failed")
    assert store.delete("video_4") and not store.delete("video_4")
    store.close()
    again = JobStore(store_url)
    assert [r.id for r in again.unfinished()] == ["video_1", "video_2", "video_3"]
    assert again.get("video_1").extras == {"stage": "denoising", "step": 3}
    assert again.count("queued") == 2 and again.queue_position(again.get("video_3")) == 1
    assert again.get("video_0").video_file == "video_0.mp4" and again.get("video_4") is None


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = _store(f"sqlite:///{tmp_path / 'jobs.sqlite'}", 0)
    with store._engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar_one().lower() == "wal"


def test_one_writer_and_readers_in_threads(store_url):
    store = _store(store_url, 1)
    errors, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            try:
                assert store.get("video_0").progress <= 100
                store.list(limit=5)
            except Exception as error:  # noqa: BLE001 - collected for the assert below
                errors.append(error)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    for progress in range(101):
        store.update("video_0", progress=progress)
    time.sleep(0.05)
    stop.set()
    for reader in readers:
        reader.join()
    assert errors == [] and store.get("video_0").progress == 100
