"""Job ownership in the store, on SQLite and on PostgreSQL: claims are exclusive across
connections, leases lapse and re-queue, and only the current (owner, attempt) may write."""

import threading
import time

import pytest
from sqlalchemy import create_engine, text

from pipedit.serve.jobs.store import JobRecord, JobStore
from serve_helpers import PRE_OWNERSHIP_JOBS_TABLE

LEASE_S = 2.0  # the heartbeat test's lease


def _fill(store, n):
    for i in range(n):
        store.add(JobRecord(id=f"video_{i:02d}", status="queued", created_at=1000.0 + i, params={"i": i}))


def test_claims_take_the_oldest_free_job_once(store_url):
    store = JobStore(store_url)
    _fill(store, 2)
    first, second = store.claim("a", 30), store.claim("b", 30)
    assert (first.id, first.owner, first.attempt) == ("video_00", "a", 1)
    assert (second.id, second.owner) == ("video_01", "b") and store.claim("a", 30) is None
    assert store.get("video_00").status == "queued" and store.get("video_00").lease_until > time.time()
    store.close()


def test_concurrent_claimers_never_share_a_job(store_url):
    _fill(seed := JobStore(store_url), 24)
    stores = [JobStore(store_url) for _ in range(4)]  # separate connection pools, as replicas have
    taken: dict[str, list[str]] = {str(i): [] for i in range(4)}

    def claim_all(name, store):
        while (record := store.claim(name, 30)) is not None:
            taken[name].append(record.id)

    threads = [threading.Thread(target=claim_all, args=(str(i), s)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    everything = [job for ids in taken.values() for job in ids]
    assert sorted(everything) == [f"video_{i:02d}" for i in range(24)]  # each exactly once
    assert {r.owner for r in seed.unfinished()} == {name for name, ids in taken.items() if ids}
    for store in stores + [seed]:
        store.close()


def test_a_lapsed_lease_requeues_and_fences_the_late_owner(store_url):
    store = JobStore(store_url)
    _fill(store, 1)
    dead = store.claim("dead", 0.3)
    assert store.update_owned(dead.id, "dead", 1, status="in_progress", progress=40)
    assert store.requeue_expired() == []  # not lapsed yet
    time.sleep(0.5)
    assert store.requeue_expired() == [dead.id]
    requeued = store.get(dead.id)
    assert (requeued.status, requeued.owner, requeued.progress) == ("queued", None, 0)
    alive = store.claim("alive", 30)
    assert (alive.id, alive.attempt) == (dead.id, 2)
    assert not store.update_owned(dead.id, "dead", 1, status="completed", progress=100)  # the late result
    assert store.update_owned(dead.id, "alive", 2, status="completed", progress=100)
    assert not store.update_owned(dead.id, "alive", 2, status="failed")  # final stays final
    final = store.get(dead.id)
    assert (final.status, final.owner, final.attempt) == ("completed", "alive", 2)
    store.close()


def test_heartbeats_keep_a_lease_and_say_which_jobs_are_gone(store_url):
    store = JobStore(store_url)
    _fill(store, 2)
    # Heartbeats for 3 s keep a 2 s lease; the last one is checked at once, so only a stall of
    # 2 s between two statements (a very busy machine) could let it lapse.
    kept, deleted = store.claim("me", LEASE_S), store.claim("me", LEASE_S)
    store.delete(deleted.id)
    for _ in range(6):
        assert store.heartbeat("me", {kept.id, deleted.id}, LEASE_S) == {kept.id}
        time.sleep(0.5)
    assert store.heartbeat("me", {kept.id}, LEASE_S) == {kept.id}
    assert store.requeue_expired() == [] and store.get(kept.id).owner == "me"
    assert store.heartbeat("someone else", {kept.id}, LEASE_S) == set()
    assert store.release("me") == [kept.id] and store.get(kept.id).owner is None
    store.close()


def test_queue_counts_per_client(store_url):
    store = JobStore(store_url)
    for i, client in enumerate(["k1", "k1", "k2", None]):
        store.add(JobRecord(id=f"video_{i}", status="queued", created_at=float(i), params={}, client=client))
    assert store.count("queued") == 4 and store.count("queued", client="k1") == 2
    assert store.count("queued", client="k3") == 0
    store.close()


def test_a_store_from_before_ownership_gets_its_columns(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    old = create_engine(url)
    with old.begin() as conn:
        conn.execute(text(PRE_OWNERSHIP_JOBS_TABLE))
        conn.execute(text("INSERT INTO jobs VALUES ('video_old', 'in_progress', 50, 1.0, NULL, '{}', '{}', NULL, "
                          "NULL)"))
    old.dispose()
    store = JobStore(url)
    assert store.get("video_old").attempt == 0
    assert store.requeue_expired() == ["video_old"]  # running with no owner: its server died
    assert store.claim("new", 30).attempt == 1
    store.close()


def test_unknown_columns_and_the_id_cannot_be_updated(tmp_path):
    store = JobStore.in_folder(tmp_path)
    for fields in ({"nonsense": 1}, {"id": "video_x"}):
        with pytest.raises(ValueError, match="cannot update"):
            store.update_owned("video_0", "me", 1, **fields)
    store.close()


@pytest.mark.slow
def test_claimers_in_separate_processes_never_share_a_job(store_url):
    import multiprocessing

    from store_claimer import claim_all_in_a_process

    _fill(seed := JobStore(store_url), 30)
    context = multiprocessing.get_context("spawn")
    results, start = context.Queue(), context.Barrier(3)
    workers = [context.Process(target=claim_all_in_a_process, args=(store_url, f"p{i}", results, start))
               for i in range(3)]
    for worker in workers:
        worker.start()
    taken = dict(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    everything = sorted(job for ids in taken.values() for job in ids)
    assert everything == [f"video_{i:02d}" for i in range(30)]  # each exactly once, across processes
    assert all(seed.get(job).owner == name for name, ids in taken.items() for job in ids)
    assert sum(1 for ids in taken.values() if ids) >= 2  # they did compete
    seed.close()


def test_an_owner_hands_its_attempt_back_and_finished_jobs_age_out(store_url):
    store = JobStore(store_url)
    _fill(store, 3)
    claimed = store.claim("a", 30)
    assert store.update_owned(claimed.id, "a", 1, status="queued", owner=None, lease_until=None)  # the column
    assert store.get(claimed.id).owner is None and store.claim("b", 30).id == claimed.id
    store.update_owned(claimed.id, "b", 2, status="failed", extras={"finished_at": 2000.0})
    other = store.claim("b", 30)
    store.update_owned(other.id, "b", 1, status="completed", completed_at=3000.0)
    assert store.finished_before(2500.0) == [claimed.id]  # finished_at 2000, not created_at 1000
    assert store.finished_before(3500.0) == [claimed.id, other.id]  # never the queued third
    store.close()


def test_leases_run_on_the_database_clock_not_the_hosts(store_url, monkeypatch):
    """Replicas on hosts whose clocks disagree share one lease clock: the database's. A replica whose
    host runs an hour ahead neither re-queues a running job nor writes a lease an hour long."""
    store = JobStore(store_url)
    _fill(store, 1)
    before = store.clock()
    claimed = store.claim("a", 30)
    assert before + 30 <= claimed.lease_until <= store.clock() + 30
    monkeypatch.setattr(time, "time", lambda real=time.time: real() + 3600)  # this host's clock skewed
    assert store.requeue_expired() == []  # a host clock would have freed it
    # 3 s: the reads below come well within it, also on a busy machine (0.3 s lapsed there once).
    assert store.heartbeat("a", {claimed.id}, 3) == {claimed.id}
    assert store.get(claimed.id).lease_until < before + 60  # not host time + 3 (an hour later)
    assert store.lease_holds(claimed.id, "a", 1) and not store.lease_holds(claimed.id, "a", 2)
    deadline = time.monotonic() + 15
    while not (freed := store.requeue_expired()) and time.monotonic() < deadline:  # lapses on the database's clock
        time.sleep(0.1)
    assert freed == [claimed.id] and not store.lease_holds(claimed.id, "a", 1)
    store.close()
