"""Runs requests through the world's ranks.

With decode ranks (DeDiVAE), request k's latents go to a free decode rank and request k+1
starts denoising at once; results come back in completion order. While no decode is in flight
the denoise steps can hand attention heads to the idle decode ranks (Aco), when the Aco policy
says it pays. Without decode ranks, denoise rank 0 decodes after the last step.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator

from ..attention.aco import AcoShape
from ..attention.autotune import pick_faster
from ..request import RequestCancelled, RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from .layout import WorldLayout

EventCallback = Callable[[RequestEvent], None]
CancelCheck = Callable[[str], bool]  # request id -> cancelled
Outcome = VideoResult | RequestFailure
ACO_ROUNDS = 5


class PipelineScheduler:
    def __init__(self, executor, layout: WorldLayout, aco: str = "auto"):
        self.executor = executor
        self.layout = layout
        self.aco_mode = aco  # the engine's policy; runs may override it
        self.aco_choice: dict[AcoShape, bool] = {}  # attention shape (text_len 0) -> Aco pays
        self.aco_calls: int | None = None  # attention calls per forward, asked once

    def session(self, on_event: EventCallback, is_cancelled: CancelCheck) -> "_Run":
        """A long-lived run for requests that arrive over time (pipedit.runtime.engine_core):
        `submit` one request at a time, `poll` for decodes that finished meanwhile."""
        return _Run(self, on_event, True, self.aco_mode if self.layout.aco else "off", is_cancelled)

    def run(self, requests: Iterable[VideoRequest], on_event: EventCallback | None = None,
            pipelined: bool = True, aco: str | None = None) -> Iterator[Outcome]:
        """Yields one outcome per request, in completion order. `pipelined=False` waits for each
        decode before the next request starts (the sequential baseline of `bench pipeline`)."""
        emit = on_event or (lambda event: None)
        aco_mode = (aco or self.aco_mode) if self.layout.aco else "off"  # no helpers: no Aco
        run = _Run(self, emit, pipelined, aco_mode)
        for request in requests:
            emit(RequestEvent(request.request_id, RequestStatus.QUEUED))
        for request in requests:
            yield from run.submit(request)
        yield from run.drain()


@dataclass
class _Decoding:
    """A request whose latents a decode rank holds."""

    request: VideoRequest
    rank: int
    started: float  # when the request began (encode)
    handed: float  # when its latents were handed off
    timings: dict


class _Run:
    """State of one `run` call: decodes in flight and free decode ranks."""

    def __init__(self, scheduler: PipelineScheduler, emit: EventCallback, pipelined: bool, aco_mode: str,
                 is_cancelled: CancelCheck = lambda request_id: False):
        self.s = scheduler
        self.is_cancelled = is_cancelled
        self.ex = scheduler.executor
        self.layout = scheduler.layout
        self.emit = emit
        self.pipelined = pipelined
        self.aco_mode = aco_mode
        self.in_flight: dict = {}  # decode call ref -> _Decoding
        self.free = deque(self.layout.decode_ranks)
        self.shape_of: tuple = (None, None)  # (request id, its AcoShape)

    def submit(self, request: VideoRequest) -> Iterator[Outcome]:
        phase, started = "encode", time.perf_counter()
        timings: dict[str, float] = {}
        try:
            self._check_cancelled(request)
            self.emit(RequestEvent(request.request_id, RequestStatus.ENCODING))
            cond = self.ex.call_rank(self.layout.text_rank, "encode_prompt", request)
            timings["encode_s"] = time.perf_counter() - started
            phase = "denoise"
            yield from self._denoise(request, cond, timings)
            phase = "decode"
            self._check_cancelled(request)
            outcome = yield from self._hand_off(request, timings, started)
            if outcome is not None:
                yield outcome
        except Exception as error:  # noqa: BLE001 - one request's failure must not stop the rest
            yield self._failed(request, phase, error)

    def _denoise(self, request: VideoRequest, cond, timings: dict) -> Iterator[Outcome]:
        start = time.perf_counter()
        total = self.ex.call("begin", request, cond)[0]
        self.emit(RequestEvent(request.request_id, RequestStatus.DENOISING, 0, total))
        aco_steps = 0
        for _ in range(total):
            self._check_cancelled(request)  # between steps: a cancelled request stops within one
            use_aco = self._aco_now(request)
            done = self._step(request, use_aco)
            aco_steps += use_aco
            self.emit(RequestEvent(request.request_id, RequestStatus.DENOISING, done, total))
            yield from self._collect(block=False)
        timings["denoise_s"] = time.perf_counter() - start
        timings["aco_steps"] = aco_steps

    def _hand_off(self, request: VideoRequest, timings: dict, started: float):
        self.emit(RequestEvent(request.request_id, RequestStatus.DECODING))
        if not self.layout.decode:
            start = time.perf_counter()
            result = self.ex.call("finish")[0]
            timings["decode_s"] = time.perf_counter() - start
            return self._done(request, result, timings, started)
        while not self.free:
            yield from self._collect(block=True, first_only=True)
        rank = self.free.popleft()
        handed = self.ex.submit("finish", rank)[0]
        latents = handed if self.layout.handoff == "object_store" else None
        ref = self.ex.submit_rank(rank, "decode", request, latents)
        self.in_flight[ref] = _Decoding(request, rank, started, time.perf_counter(), timings)
        if not self.pipelined:
            yield from self._collect(block=True)
        return None

    def _collect(self, block: bool, first_only: bool = False) -> Iterator[Outcome]:
        while self.in_flight:
            if block:
                ready = [self.ex.wait_one(list(self.in_flight))]
            else:
                ready = self.ex.ready(list(self.in_flight))
                if not ready:
                    return
            for ref in ready:
                decoding = self.in_flight.pop(ref)
                self.free.append(decoding.rank)
                try:
                    result = self.ex.get(ref)
                    self._check_cancelled(decoding.request)  # a cancelled decode is discarded
                    decoding.timings["decode_s"] = time.perf_counter() - decoding.handed
                    yield self._done(decoding.request, result, decoding.timings, decoding.started)
                except Exception as error:  # noqa: BLE001
                    yield self._failed(decoding.request, "decode", error)
            if first_only or not block:
                return

    def poll(self) -> Iterator[Outcome]:
        """Outcomes of decodes that finished, without waiting."""
        yield from self._collect(block=False)

    def drain(self) -> Iterator[Outcome]:
        yield from self._collect(block=True)

    def _check_cancelled(self, request: VideoRequest) -> None:
        if self.is_cancelled(request.request_id):
            raise RequestCancelled(request.request_id)

    def _done(self, request, result: VideoResult, timings: dict, started: float) -> VideoResult:
        result.timings.update(timings, latency_s=time.perf_counter() - started)
        self.emit(RequestEvent(request.request_id, RequestStatus.DONE))
        return result

    def _failed(self, request, phase: str, error: BaseException) -> RequestFailure:
        cancelled = isinstance(error, RequestCancelled)
        self.emit(RequestEvent(request.request_id, RequestStatus.CANCELLED if cancelled else RequestStatus.FAILED))
        return RequestFailure(request.request_id, phase, error)

    # -- Aco ------------------------------------------------------------------------------
    def _aco_now(self, request: VideoRequest) -> bool:
        """Aco only while every decode rank is idle, and only where it pays (auto) or asked (on)."""
        if self.aco_mode == "off" or self.in_flight:
            return False
        if self.aco_mode == "on":
            return True
        shape = self._aco_shape(request)
        # Decided once per video shape: prompts of other text lengths reuse the decision.
        key = replace(shape, text_len=0)
        if key not in self.s.aco_choice:
            self.s.aco_choice[key] = self._measure_aco(shape)
        return self.s.aco_choice[key]

    def _aco_shape(self, request: VideoRequest) -> AcoShape:
        if self.shape_of[0] != request.request_id:
            self.shape_of = (request.request_id, self.ex.call_rank(0, "aco_shape", request))
        return self.shape_of[1]

    def _step(self, request: VideoRequest, use_aco: bool) -> int:
        if not use_aco:
            return self.ex.call("step", False)[0]
        return self._with_helpers("step", True, self._aco_shape(request))[0]

    def _with_helpers(self, method: str, arg, shape: AcoShape) -> list:
        """Runs `method(arg)` on the denoise ranks while the decode ranks serve Aco heads for one
        forward; returns the denoise ranks' results.

        Hazard: if a denoise rank fails inside this forward, the helpers wait for messages that
        never come, until the process group's timeout; the failure is reported for the request."""
        if self.s.aco_calls is None:
            self.s.aco_calls = self.ex.call_rank(0, "aco_calls")
        helpers = [self.ex.submit_rank(r, "aco_serve", shape, self.s.aco_calls) for r in self.layout.decode_ranks]
        denoise = self.ex.submit(method, arg)
        return self.ex.get(denoise + helpers)[: self.layout.denoise]

    def _measure_aco(self, shape: AcoShape) -> bool:
        """Interleaved rounds of one forward without and with Aco (slowest rank per sample); the
        first round warms up. Aco wins only as pick_faster decides: clearly and consistently."""
        samples: dict = {None: [], True: []}
        for _ in range(ACO_ROUNDS + 1):
            samples[None].append(max(self.ex.call("time_forward", False)))
            samples[True].append(max(self._with_helpers("time_forward", True, shape)))
        return pick_faster({key: times[1:] for key, times in samples.items()}) is True
