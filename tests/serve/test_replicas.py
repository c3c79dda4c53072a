"""Two job services (replicas) on one store, SQLite and PostgreSQL, over engines that make a tiny
video in a fraction of a second: they share the jobs; when one dies holding a job, the other
re-queues it after the lease and completes it; the dead one's late result changes nothing."""

import threading
import time

import torch

from pipedit.config import GenerationDefaults
from pipedit.request import RequestEvent, RequestStatus, VideoResult
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.store import JobStore
from serve_helpers import wait_for

LEASE_S = 3.0  # renewed every 0.75 s: a busy machine delayed a 1 s lease's renewal past its end


class QuickEngine:
    """The engine loop's interface: one request at a time, `seconds` each, a grey 5x8x8 video.
    `freeze()` makes it hang in the request it runs (a dead replica's engine)."""

    accepting = True

    def __init__(self, seconds=0.15):
        self.seconds, self.listeners, self.queue, self.outcomes = seconds, [], [], {}
        self.running = None
        self.frozen, self.cond = threading.Event(), threading.Condition()
        threading.Thread(target=self._loop, daemon=True).start()

    @property
    def queue_length(self):
        with self.cond:
            return len(self.queue)

    def add_listener(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def submit(self, request):
        with self.cond:
            self.queue.append(request.request_id)
            self.cond.notify_all()
        return request.request_id

    def cancel(self, request_id):
        return False

    def wait(self, request_id, timeout=None):
        with self.cond:
            self.cond.wait_for(lambda: request_id in self.outcomes, timeout)
            return self.outcomes.pop(request_id)

    def freeze(self):
        self.frozen.set()

    def _emit(self, request_id, status):
        for listener in list(self.listeners):
            listener(RequestEvent(request_id, status, step=1, total_steps=1))

    def _loop(self):
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.queue)
                self.running = self.queue.pop(0)
            self._emit(self.running, RequestStatus.DENOISING)
            time.sleep(self.seconds)
            while self.frozen.is_set():
                time.sleep(0.05)
            with self.cond:
                self.outcomes[self.running] = VideoResult(self.running, torch.full((5, 8, 8, 3), 0.5), torch.zeros(1))
                self.cond.notify_all()
            self._emit(self.running, RequestStatus.DONE)


def _replica(url, folder, name):
    return JobService(QuickEngine(), JobStore(url), folder, "demo", GenerationDefaults(8, 8, 5, 1),
                      ServiceLimits(), lease_s=LEASE_S, replicas=2, owner=name)


def _die(service):
    """What a killed process leaves: its threads stop, it renews nothing and releases nothing."""
    service.engine.freeze()
    service.dispatcher.closing.set()
    service.dispatcher.wake.set()
    for thread in service.dispatcher.threads:
        thread.join(timeout=10)


def test_a_dead_replicas_job_is_finished_once_by_the_other(store_url, tmp_path):
    a, b = _replica(store_url, tmp_path, "replica-a"), _replica(store_url, tmp_path, "replica-b")
    try:
        ids = [(a if i % 2 else b).create(VideoCreateParams(prompt=f"job {i}", size="8x8")).id for i in range(6)]
        wait_for(lambda: a.engine.running is not None, timeout=10)
        held = a.engine.running
        _die(a)
        assert a.store.get(held).owner == "replica-a" and a.store.get(held).status == "in_progress"
        wait_for(lambda: all(b.store.get(i).status == "completed" for i in ids), timeout=30)
        rows = {i: b.store.get(i) for i in ids}
        assert rows[held].owner == "replica-b" and rows[held].attempt == 2  # re-queued once, then run by b
        assert all(r.progress == 100 and (tmp_path / "videos" / r.video_file).is_file() for r in rows.values())
        assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == sorted(f"{i}.mp4" for i in ids)
        # The presumed-dead replica's result arrives late: fenced off, the row and the file stay.
        before, mtime = rows[held], (tmp_path / "videos" / f"{held}.mp4").stat().st_mtime_ns
        late = VideoResult(held, torch.zeros(5, 8, 8, 3), torch.zeros(1))
        a.dispatcher.finish(late, attempt=1)
        assert b.store.get(held) == before
        assert (tmp_path / "videos" / f"{held}.mp4").stat().st_mtime_ns == mtime
    finally:
        b.close()
        for service in (a, b):
            service.store.close()


def test_both_replicas_take_jobs_and_a_closing_one_hands_its_jobs_back(store_url, tmp_path):
    a, b = _replica(store_url, tmp_path, "replica-a"), _replica(store_url, tmp_path, "replica-b")
    open_ = [a, b]
    try:
        a.engine.seconds = b.engine.seconds = 0.3
        ids = [a.create(VideoCreateParams(prompt=f"job {i}", size="8x8")).id for i in range(6)]
        wait_for(lambda: all(a.store.get(i).status == "completed" for i in ids), timeout=30)
        assert {a.store.get(i).owner for i in ids} == {"replica-a", "replica-b"}  # b took jobs a admitted
        a.engine.freeze()
        b.engine.freeze()
        last = a.create(VideoCreateParams(prompt="held at a shutdown", size="8x8")).id
        wait_for(lambda: a.store.get(last).owner is not None, timeout=10)
        holder, other = (a, b) if a.store.get(last).owner == "replica-a" else (b, a)
        holder.close()  # a clean stop hands the job back at once: no lease to wait out
        open_.remove(holder)
        other.engine.frozen.clear()
        wait_for(lambda: other.store.get(last).status == "completed", timeout=10)
        assert (other.store.get(last).owner, other.store.get(last).attempt) == (other.owner, 2)
    finally:
        for service in open_:
            service.close()
        for service in (a, b):
            service.store.close()


def test_a_replica_whose_engine_stopped_lets_its_job_go_to_another(store_url, tmp_path):
    a = _replica(store_url, tmp_path, "replica-a")
    b = None
    try:
        video_id = a.create(VideoCreateParams(prompt="stuck on a", size="8x8")).id
        wait_for(lambda: a.engine.running == video_id, timeout=10)
        a.engine.freeze()
        a.engine.accepting = False  # e.g. its rank group is gone: a stops renewing, and takes nothing new
        b = _replica(store_url, tmp_path, "replica-b")
        wait_for(lambda: b.store.get(video_id).status == "completed", timeout=15)
        assert (b.store.get(video_id).owner, b.store.get(video_id).attempt) == ("replica-b", 2)
    finally:
        for service in (a, b):
            if service is not None:
                service.close()
                service.store.close()
