"""Engine metrics computed from event timestamps (the Prometheus backend replaced by a recorder)."""

from pipedit.request import RequestEvent, RequestStatus as S
from pipedit.serve.ray_app.metrics import EngineMetrics


class _Metric:
    def __init__(self, name, **options):
        self.name, self.values = name, []

    def inc(self, value=1, tags=None):
        self.values.append((value, tags))

    def set(self, value, tags=None):
        self.values.append(value)

    def observe(self, value, tags=None):
        self.values.append(round(value, 6))


class _Backend:
    Counter = Gauge = Histogram = _Metric


def test_latencies_come_from_event_times():
    adapters = {"a": ["style", "ink"], "b": []}
    metrics = EngineMetrics(queue_length=lambda: 3, backend=_Backend, adapters_of=adapters.get)
    events = [(S.QUEUED, 0, 10.0), (S.ENCODING, 0, 10.5), (S.DENOISING, 0, 11.0), (S.DENOISING, 1, 11.25),
              (S.DENOISING, 2, 11.75), (S.DECODING, 0, 11.8), (S.DONE, 0, 13.8)]
    for status, step, at in events:
        metrics(RequestEvent("a", status, step, 2, at=at))
    metrics(RequestEvent("b", S.QUEUED, at=20.0))
    metrics(RequestEvent("b", S.CANCELLED, at=21.5))
    assert metrics.step.values == [0.25, 0.5]
    assert metrics.decode.values == [2.0]
    assert metrics.latency.values == [3.8, 1.5]
    assert metrics.requests.values == [(1, {"status": "done"}), (1, {"status": "cancelled"})]
    assert metrics.queue.values[-1] == 3
    assert metrics.lora_requests.values == [(1, {"lora": "style", "status": "done"}), (1, {"lora": "ink", "status": "done"})]
