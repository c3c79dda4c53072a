"""input_reference images in the job store (SQLite and PostgreSQL): kept with their job across a
reopen, added and deleted in one transaction with its row, never read by lists, and given to a
store written before images existed."""

import sqlite3

import pytest
from sqlalchemy.exc import IntegrityError

from pipedit.serve.jobs.store import JobRecord, JobStore
from serve_helpers import PRE_OWNERSHIP_JOBS_TABLE

IMAGE = bytes(range(256)) * 40  # every byte value: the column must be binary-clean


def _record(job_id, created_at=1000.0):
    return JobRecord(id=job_id, status="queued", created_at=created_at, params={"prompt": "a fox"})


def test_an_image_lives_and_dies_with_its_job(store_url):
    store = JobStore(store_url)
    store.add(_record("video_a"), image=IMAGE)
    store.add(_record("video_b", 1001.0))
    store.close()
    store = JobStore(store_url)  # a restart
    assert store.image("video_a") == IMAGE and store.image("video_b") is None
    with pytest.raises(IntegrityError):  # a second job of that id: neither its row nor its image is written
        store.add(_record("video_a"), image=b"other")
    assert store.image("video_a") == IMAGE
    assert [r.id for r in store.list()[0]] == ["video_b", "video_a"]
    assert store.delete("video_a")
    assert store.image("video_a") is None and store.get("video_a") is None
    store.close()


def test_a_store_from_before_images_gets_their_table(tmp_path):
    path = tmp_path / "jobs.sqlite"
    with sqlite3.connect(path) as old:
        old.execute(PRE_OWNERSHIP_JOBS_TABLE)
        old.execute("INSERT INTO jobs VALUES ('video_old', 'queued', 0, 1.0, NULL, '{}', '{}', NULL, NULL)")
    store = JobStore(f"sqlite:///{path}")
    assert store.image("video_old") is None
    store.add(_record("video_new"), image=IMAGE)
    assert store.image("video_new") == IMAGE and store.delete("video_old")
    store.close()
