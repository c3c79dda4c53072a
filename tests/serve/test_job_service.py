"""JobService without HTTP: the engine's outcomes become job rows and files, failures included."""

import threading

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig
from pipedit.errors import NonFiniteLatents
from pipedit.request import RequestEvent, RequestFailure, RequestStatus
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.from_config import open_service
from pipedit.serve.jobs.store import JobStore
from pipedit.video import read_mp4
from serve_helpers import wait_for


class FailingEngine:
    """The engine loop's interface; every request fails while denoising."""

    accepting = True

    def __init__(self, error=None):
        self.listeners, self.outcomes, self.lock = [], {}, threading.Condition()
        self.error = error or RuntimeError("out of memory")

    def add_listener(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def submit(self, request):
        with self.lock:
            self.outcomes[request.request_id] = RequestFailure(request.request_id, "denoise", self.error)
            self.lock.notify_all()
        for status in (RequestStatus.QUEUED, RequestStatus.ENCODING, RequestStatus.FAILED):
            for listener in list(self.listeners):
                listener(RequestEvent(request.request_id, status))
        return request.request_id

    def wait(self, request_id, timeout=None):
        with self.lock:
            self.lock.wait_for(lambda: request_id in self.outcomes, timeout)
            return self.outcomes.pop(request_id)

    def cancel(self, request_id):
        return False


def test_a_failed_generation_is_stored_with_its_error(tmp_path):
    service = JobService(FailingEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo", GenerationDefaults(),
                         ServiceLimits())
    try:
        video = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: service.get(video.id).status == "failed", timeout=10)
        failed = service.get(video.id)
        assert failed.error.code == "denoise_failed" and "out of memory" in failed.error.message
        assert failed.pipedit.stage == "failed" and failed.completed_at is None
    finally:
        service.close()


def test_latents_that_turned_non_finite_fail_the_job_with_their_code(tmp_path):
    service = JobService(FailingEngine(NonFiniteLatents("the latents hold NaN")), JobStore.in_folder(tmp_path),
                         tmp_path, "demo", GenerationDefaults(), ServiceLimits())
    try:
        video = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: service.get(video.id).status == "failed", timeout=10)
        failed = service.get(video.id)
        assert failed.error.code == "non_finite_latents" and "the latents hold NaN" in failed.error.message
        assert not service.videos_dir.joinpath(f"{video.id}.mp4").exists()
    finally:
        service.close()


def test_open_service_runs_a_job_and_recovers_on_reopen(demo_checkpoint, tmp_path):
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)))
    service = open_service(config, tmp_path)
    try:
        params = VideoCreateParams(prompt="a boat", size="48x32", num_frames=5, num_inference_steps=2)
        video = service.create(params)
        assert video.model == demo_checkpoint.name and video.pipedit.queue_position == 0
        wait_for(lambda: service.get(video.id).status == "completed", timeout=60)
        assert read_mp4(service.content_path(video.id)).shape == (5, 32, 48, 3)
        assert service.healthy()
    finally:
        service.shutdown()
    assert not service.healthy()
    reopened = open_service(config, tmp_path)
    try:
        assert reopened.get(video.id).status == "completed" and reopened.content_path(video.id).is_file()
    finally:
        reopened.shutdown()


def test_stopping_lets_a_running_job_finish_within_the_grace_period_and_hands_back_the_rest(tmp_path):
    """What a replica does on SIGTERM (serve.stop_grace_s): no new job; a run that ends within the
    grace period is recorded; one still running after it goes back to the queue, free for any replica."""
    from job_engines import GatedEngine, service_on
    from serve_helpers import IdleEngine

    for grace_s, engine, expected in ((30.0, GatedEngine(), "completed"), (0.2, IdleEngine(), "queued")):
        service = service_on(engine, tmp_path / str(grace_s))
        job = service.create(VideoCreateParams(prompt="a fox"))
        wait_for(lambda: engine.submitted == [job.id], timeout=30)
        closing = threading.Thread(target=service.close, args=(grace_s,))
        closing.start()
        wait_for(lambda: not service.healthy(), timeout=30)  # it takes no new work from here on
        if expected == "completed":
            engine.go.set()  # the run ends within the grace period
        closing.join(timeout=60)
        assert not closing.is_alive()
        stored = service.store.get(job.id)
        assert stored.status == expected, stored
        assert stored.owner is None or expected == "completed", stored  # handed back: any replica may run it
        service.store.close()
