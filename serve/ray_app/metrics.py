"""Prometheus metrics of the engine, exported through Ray Serve's metrics endpoint.

Fed by the engine loop's events (their wall-clock `at`), so they measure what the engine did:
requests by final status (and by LoRA adapter), queue length, seconds per denoising step, per
decode, and end to end (queued to final status).
"""

from __future__ import annotations

import threading

from pipedit.request import RequestEvent, RequestStatus

_LATENCY_BOUNDARIES = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800]


def ray_backend():
    from ray.serve import metrics

    return metrics


class EngineMetrics:
    """An engine-core listener (`core.add_listener(EngineMetrics(core.queue_length_fn))`)."""

    def __init__(self, queue_length, backend=None, adapters_of=None):
        """`adapters_of(request id)`: the names of the LoRA adapters the request chose (none: no
        per-adapter counts)."""
        m = backend or ray_backend()
        self._queue_length, self._adapters_of = queue_length, adapters_of
        self.requests = m.Counter("pipedit_requests", description="requests by final status", tag_keys=("status",))
        self.lora_requests = m.Counter("pipedit_lora_requests", description="requests that chose a LoRA adapter, "
                                       "by adapter and final status", tag_keys=("lora", "status"))
        self.queue = m.Gauge("pipedit_queue_length", description="requests waiting for the denoise ranks")
        self.step = m.Histogram("pipedit_step_seconds", description="seconds per denoising step",
                                boundaries=_LATENCY_BOUNDARIES)
        self.decode = m.Histogram("pipedit_decode_seconds", description="seconds from decode start to done",
                                  boundaries=_LATENCY_BOUNDARIES)
        self.latency = m.Histogram("pipedit_request_seconds", description="seconds from queued to a final status",
                                   boundaries=_LATENCY_BOUNDARIES)
        self._lock = threading.Lock()
        self._queued_at: dict[str, float] = {}
        self._last_step_at: dict[str, float] = {}
        self._decode_at: dict[str, float] = {}

    def __call__(self, event: RequestEvent) -> None:
        with self._lock:
            self._record(event)
        self.queue.set(self._queue_length())

    def _record(self, event: RequestEvent) -> None:
        rid, status = event.request_id, event.status
        if status is RequestStatus.QUEUED:
            self._queued_at[rid] = event.at
        elif status is RequestStatus.DENOISING:
            if event.step > 0 and rid in self._last_step_at:
                self.step.observe(event.at - self._last_step_at[rid])
            self._last_step_at[rid] = event.at
        elif status is RequestStatus.DECODING:
            self._decode_at[rid] = event.at
        if not status.final:
            return
        self.requests.inc(tags={"status": status.value})
        for name in self._adapters_of(rid) if self._adapters_of else ():
            self.lora_requests.inc(tags={"lora": name, "status": status.value})
        if status is RequestStatus.DONE and rid in self._decode_at:
            self.decode.observe(event.at - self._decode_at[rid])
        if rid in self._queued_at:
            self.latency.observe(event.at - self._queued_at[rid])
        for table in (self._queued_at, self._last_step_at, self._decode_at):
            table.pop(rid, None)
