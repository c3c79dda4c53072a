"""Tenant isolation: with API keys, a job is its creator's key's. Other keys get 404 for it on
every route (get, content, events, delete) and do not see it in lists; serve.admin_keys see all.
Rows without an owner (older stores, or made while the server had no keys) are admins' only;
without keys everyone sees every job. Old stores get the owner column at startup."""

import json
import time

import pytest
from sqlalchemy import create_engine, text

from pipedit.serve.jobs.admission import client_of
from pipedit.serve.jobs.store import JobRecord, JobStore
from idle_app import start_idle
from serve_helpers import PRE_OWNERSHIP_JOBS_TABLE, call

ALICE, BOB, ADMIN = "alice-key", "bob-key", "admin-key"
PARAMS = {"prompt": "a fox", "width": 64, "height": 64, "num_frames": 5, "fps": 24, "num_inference_steps": 2,
          "guidance_scale": 6.0, "seed": 1, "seconds": "0.208"}


def _as(key):
    return {"Authorization": f"Bearer {key}"}


def _error(reply, status, code):
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    return error


@pytest.fixture
def keyed(tmp_path):
    app = start_idle(tmp_path, api_keys=(ALICE, BOB, ADMIN), admin_keys=(ADMIN,))
    yield app
    app.close()


def _complete(app, video_id):
    """Marks a job completed with an mp4 (the idle engine makes none)."""
    (app.service.videos_dir / f"{video_id}.mp4").write_bytes(b"\0\0\0\x18ftypmp42 fake mp4")
    assert app.service.store.update(video_id, status="completed", progress=100, completed_at=time.time(),
                                    video_file=f"{video_id}.mp4")


def test_a_job_is_invisible_to_other_keys(keyed):
    url = keyed.url
    created = call("POST", f"{url}/v1/videos", {"prompt": "alice's fox", "size": "64x64"}, headers=_as(ALICE))
    assert created.status == 200, created.body
    video_id = created.json()["id"]
    _complete(keyed, video_id)
    # What the review sent as Bob: list, download, delete (all were 200).
    assert video_id not in [v["id"] for v in call("GET", f"{url}/v1/videos", headers=_as(BOB)).json()["data"]]
    _error(call("GET", f"{url}/v1/videos/{video_id}", headers=_as(BOB)), 404, "video_not_found")
    _error(call("GET", f"{url}/v1/videos/{video_id}/content", headers=_as(BOB)), 404, "video_not_found")
    _error(call("GET", f"{url}/v1/videos/{video_id}/events", headers=_as(BOB)), 404, "video_not_found")
    _error(call("DELETE", f"{url}/v1/videos/{video_id}", headers=_as(BOB)), 404, "video_not_found")
    _error(call("GET", f"{url}/v1/videos?after={video_id}", headers=_as(BOB)), 400, "invalid_value")
    # A 401 names its scheme (RFC 6750), with a key or without.
    for headers in ({}, _as("not-a-key")):
        reply = call("GET", f"{url}/v1/videos/{video_id}", headers=headers)
        _error(reply, 401, "invalid_api_key")
        challenge = {k.lower(): v for k, v in reply.headers.items()}["www-authenticate"]
        assert challenge.startswith("Bearer ") and ("invalid_token" in challenge) == bool(headers)
    # Alice still has it, whole.
    assert [v["id"] for v in call("GET", f"{url}/v1/videos", headers=_as(ALICE)).json()["data"]] == [video_id]
    assert call("GET", f"{url}/v1/videos/{video_id}", headers=_as(ALICE)).json()["status"] == "completed"
    content = call("GET", f"{url}/v1/videos/{video_id}/content", headers=_as(ALICE))
    assert content.status == 200 and content.body[4:8] == b"ftyp"
    # The admin sees and may delete every key's jobs.
    assert video_id in [v["id"] for v in call("GET", f"{url}/v1/videos", headers=_as(ADMIN)).json()["data"]]
    assert call("GET", f"{url}/v1/videos/{video_id}/content", headers=_as(ADMIN)).status == 200
    assert call("DELETE", f"{url}/v1/videos/{video_id}", headers=_as(ADMIN)).json()["deleted"] is True
    assert call("GET", f"{url}/v1/videos/{video_id}", headers=_as(ALICE)).status == 404


def test_each_key_lists_only_its_own_and_pages_within_them(keyed):
    url = keyed.url
    mine = [call("POST", f"{url}/v1/videos", {"prompt": f"bob {i}"}, headers=_as(BOB)).json()["id"] for i in range(3)]
    theirs = call("POST", f"{url}/v1/videos", {"prompt": "alice"}, headers=_as(ALICE)).json()["id"]
    first = call("GET", f"{url}/v1/videos?limit=2&order=asc", headers=_as(BOB)).json()
    assert [v["id"] for v in first["data"]] == mine[:2] and first["has_more"] is True
    rest = call("GET", f"{url}/v1/videos?limit=2&order=asc&after={first['last_id']}", headers=_as(BOB)).json()
    assert [v["id"] for v in rest["data"]] == mine[2:] and rest["has_more"] is False
    everything = call("GET", f"{url}/v1/videos?limit=100", headers=_as(ADMIN)).json()["data"]
    assert {v["id"] for v in everything} == {*mine, theirs}
    # The owner is a digest of the key, the same one the per-key queue limit counts.
    record = keyed.service.store.get(theirs)
    assert record.client == client_of(ALICE) and ALICE not in record.client
    assert keyed.service.store.count("queued", client=client_of(BOB)) == 3


def test_rows_without_owner_are_for_admins_when_keys_are_set(keyed, tmp_path):
    keyed.service.store.add(JobRecord(id="video_old", status="failed", created_at=1.0, params=PARAMS,
                                      extras={"stage": "failed"}, error={"code": "x", "message": "old"}))
    _error(call("GET", f"{keyed.url}/v1/videos/video_old", headers=_as(ALICE)), 404, "video_not_found")
    assert call("GET", f"{keyed.url}/v1/videos", headers=_as(ALICE)).json()["data"] == []
    assert call("GET", f"{keyed.url}/v1/videos/video_old", headers=_as(ADMIN)).status == 200


def test_without_keys_everyone_sees_every_job(tmp_path):
    app = start_idle(tmp_path)
    try:
        app.service.store.add(JobRecord(id="video_old", status="queued", created_at=1.0, params=PARAMS,
                                        extras={"stage": "queued"}))
        app.service.store.add(JobRecord(id="video_keyed", status="queued", created_at=2.0, params=PARAMS,
                                        extras={"stage": "queued"}, client=client_of(ALICE)))
        assert {v["id"] for v in call("GET", f"{app.url}/v1/videos").json()["data"]} == {"video_old", "video_keyed"}
        assert call("GET", f"{app.url}/v1/videos/video_keyed").status == 200
        assert call("DELETE", f"{app.url}/v1/videos/video_old").status == 200
    finally:
        app.close()


def test_admin_keys_must_be_api_keys(tmp_path):
    with pytest.raises(ValueError, match="admin_keys"):
        start_idle(tmp_path, api_keys=(ALICE,), admin_keys=(ADMIN,))


def test_a_key_with_spaces_around_it_is_refused_at_start(tmp_path, capsys):
    # No request could ever present it (a Bearer header's key is read stripped): refused before Ray starts.
    from pipedit.cli import main

    for given in (["--api-key", " alice-key"], ["--api-key", "bob-key", "--api-key", "alice-key\t"]):
        assert main(["serve", "--data-dir", str(tmp_path), *given]) == 2
        message = capsys.readouterr().err
        assert "serve.api_keys[" in message and "whitespace" in message and "alice-key" not in message
    config = tmp_path / "keys.yaml"
    config.write_text("serve: {api_keys: [alice-key, 'admin-key '], admin_keys: ['admin-key ']}")
    assert main(["serve", "--config", str(config)]) == 2
    assert "serve.api_keys[1]" in capsys.readouterr().err


def test_the_web_page_stays_open_with_keys(keyed):
    assert call("GET", f"{keyed.url}/").status == 200
    assert call("GET", f"{keyed.url}/v1/pipedit/options").json()["api_key_required"] is True
    # What the page sends: JSON with its Bearer key, from its own origin.
    reply = call("POST", f"{keyed.url}/v1/videos", {"prompt": "from the page"},
                 headers={**_as(ALICE), "Origin": keyed.url, "Sec-Fetch-Site": "same-origin"})
    assert reply.status == 200, reply.body


def test_an_old_store_gets_the_owner_column(store_url):
    """A jobs table from before owners (no owner/lease/attempt/client columns) keeps working:
    the columns are added at startup, once, and its rows have no owner."""
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text(PRE_OWNERSHIP_JOBS_TABLE))
        conn.execute(text("INSERT INTO jobs (id, status, progress, created_at, params, extras) "
                          "VALUES ('video_old', 'completed', 100, 1.0, :params, '{}')"), {"params": json.dumps(PARAMS)})
    engine.dispose()
    for _ in range(2):  # idempotent: the second start finds the columns
        store = JobStore(store_url)
        assert store.get("video_old").client is None
        store.close()
    store = JobStore(store_url)
    try:
        store.add(JobRecord(id="video_new", status="queued", created_at=2.0, params=PARAMS, client="c1"))
        assert [r.id for r in store.list(client="c1")[0]] == ["video_new"]
        assert {r.id for r in store.list()[0]} == {"video_old", "video_new"}
        with pytest.raises(KeyError):
            store.list(after="video_old", client="c1")
    finally:
        store.close()


def test_an_idempotency_key_makes_one_job_per_key_and_request(keyed, tmp_path):
    # The known rare duplicate: `pipedit render --endpoint` retrying a create whose answer was lost.
    from concurrent.futures import ThreadPoolExecutor

    from image_inputs import multipart

    url, store = keyed.url, keyed.service.store
    again = {**_as(ALICE), "Idempotency-Key": "line-1-of-prompts"}
    first = call("POST", f"{url}/v1/videos", {"prompt": "a fox", "size": "64x64", "seed": 5}, headers=again)
    assert first.status == 200 and "idempotent-replayed" not in {k.lower() for k in first.headers}
    video_id = first.json()["id"]
    # The same request again (as JSON, or as the multipart form the openai SDK 3 sends): the first job.
    body, form = multipart({"prompt": "a fox", "size": "64x64", "seed": "5"})
    for retry in (call("POST", f"{url}/v1/videos", {"seed": 5, "size": "64x64", "prompt": "a fox"}, headers=again),
                  call("POST", f"{url}/v1/videos", data=body, headers={**again, **form})):
        assert retry.status == 200 and retry.json()["id"] == video_id, retry.body
        assert {k.lower(): v for k, v in retry.headers.items()}["idempotent-replayed"] == "true"
    # The same key with another request: 409, nothing made.
    reply = call("POST", f"{url}/v1/videos", {"prompt": "a fox", "size": "64x64", "seed": 6}, headers=again)
    error = _error(reply, 409, "idempotency_key_reused")
    assert video_id in error["message"] and error["param"] == "Idempotency-Key"
    # Another key's equal Idempotency-Key is its own job; parallel retries of one key make one job.
    other = call("POST", f"{url}/v1/videos", {"prompt": "a fox", "size": "64x64", "seed": 5},
                 headers={**_as(BOB), "Idempotency-Key": "line-1-of-prompts"})
    assert other.status == 200 and other.json()["id"] != video_id
    parallel = {**_as(BOB), "Idempotency-Key": "a-parallel-retry"}
    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(lambda _: call("POST", f"{url}/v1/videos", {"prompt": "a boat"}, headers=parallel),
                                range(6)))
    assert all(r.status == 200 for r in replies) and len({r.json()["id"] for r in replies}) == 1
    rows, _ = store.list(limit=100)
    assert len(rows) == 3
    # A bad key is refused; a deleted job's key makes a new one.
    _error(call("POST", f"{url}/v1/videos", {"prompt": "a fox"}, headers={**_as(ALICE), "Idempotency-Key": "a b"}),
           400, "invalid_value")
    assert call("DELETE", f"{url}/v1/videos/{video_id}", headers=_as(ALICE)).status == 200
    fresh = call("POST", f"{url}/v1/videos", {"prompt": "a fox", "size": "64x64", "seed": 6}, headers=again)
    assert fresh.status == 200 and fresh.json()["pipedit"]["seed"] == 6


def test_a_retry_of_an_accepted_create_is_not_refused_by_a_full_queue(tmp_path):
    from pipedit.serve.contract.params import ServiceLimits

    app = start_idle(tmp_path, api_keys=(ALICE,), limits=ServiceLimits(max_queued_per_key=1))
    try:
        headers = {**_as(ALICE), "Idempotency-Key": "k-1"}
        first = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers=headers)
        assert call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers=_as(ALICE)).status == 429
        retry = call("POST", f"{app.url}/v1/videos", {"prompt": "a fox"}, headers=headers)
        assert retry.status == 200 and retry.json()["id"] == first.json()["id"]
    finally:
        app.close()


def test_the_store_refuses_a_second_job_with_an_idempotent_id(store_url):
    # What makes one job per Idempotency-Key hold across replicas: a second row with the id fails.
    from sqlalchemy.exc import IntegrityError

    from pipedit.serve.http.idempotency import job_id_for

    store = JobStore(store_url)
    try:
        record = JobRecord(id=job_id_for(client_of(ALICE), "k"), status="queued", created_at=time.time(), params=PARAMS)
        store.add(record)
        with pytest.raises(IntegrityError):
            store.add(record)
        assert job_id_for(client_of(BOB), "k") != record.id and job_id_for(None, "k") != record.id
    finally:
        store.close()
