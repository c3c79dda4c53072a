"""One batch of consecutive prompts through an engine, timed from the driver: when each request
finished (all are submitted at the batch start), each denoising step's duration, and each
request's own phase timings. `bench latency` and `bench pipeline` both run their modes with it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..images import placeholder_for
from ..request import RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult

PROMPTS = ["a red fox running through fresh snow", "a lighthouse at dusk, waves", "a city street in the rain at night",
           "a hot air balloon over green hills", "a cat chasing a butterfly", "ocean waves on black sand"]


def batch_requests(height: int, width: int, num_frames: int, steps: int, count: int,
                   needs_image: bool = False) -> list[VideoRequest]:
    """`count` different prompts (cycling through PROMPTS) of one shape, seeds 0..count-1; with
    the placeholder image for a model that needs one (image-to-video)."""
    return [placeholder_for(VideoRequest(PROMPTS[i % len(PROMPTS)], height=height, width=width,
                                         num_frames=num_frames, steps=steps, seed=i), needs_image)
            for i in range(count)]


@dataclass
class BatchRun:
    total_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)  # submit (batch start) -> video, in completion order
    results: list[VideoResult] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # every denoising step of every request
    failures: list[RequestFailure] = field(default_factory=list)

    @property
    def aco_steps(self) -> int:
        return sum(int(r.timings.get("aco_steps", 0)) for r in self.results)


class _StepClock:
    """Step durations from the request pipeline's events: the time between a request's consecutive
    DENOISING events (the first one comes when its denoising begins)."""

    def __init__(self, run: BatchRun):
        self.run, self.last = run, {}

    def __call__(self, event: RequestEvent) -> None:
        if event.status is not RequestStatus.DENOISING:
            return
        now = time.perf_counter()
        if event.step > 0 and event.request_id in self.last:
            self.run.step_s.append(now - self.last[event.request_id])
        self.last[event.request_id] = now


def run_batch(engine, requests: list[VideoRequest], on_done: Callable[[int, float, VideoResult], None] | None = None,
              **options) -> BatchRun:
    """All requests submitted at once; `options` go to engine.generate_many (pipelined, aco).
    on_done(index in completion order, seconds since the start, result) after each video."""
    run = BatchRun()
    start = time.perf_counter()
    for outcome in engine.generate_many(requests, on_event=_StepClock(run), **options):
        if isinstance(outcome, RequestFailure):
            run.failures.append(outcome)
            continue
        run.latencies_s.append(time.perf_counter() - start)
        run.results.append(outcome)
        if on_done is not None:
            on_done(len(run.results), run.latencies_s[-1], outcome)
    run.total_s = time.perf_counter() - start
    return run
