"""Runs requests through the world's ranks.

With decode ranks (DeDiVAE), request k's latents go to a free decode rank and request k+1
starts denoising at once; results come back in completion order. While no decode is in flight
the denoise steps can hand attention heads to the idle decode ranks (Aco), when the Aco policy
says it pays. Without decode ranks, denoise rank 0 decodes after the last step.

Every rank call runs under a deadline (see .deadlines). A failure of the rank group (a rank died,
hung, ran out of memory or raised) fails the requests it touched and marks the run `broken`;
`recover` then lets healthy decodes finish, rebuilds the group and goes on.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator

from ..attention.aco import AcoShape
from ..attention.autotune import pick_faster
from ..config import ReliabilityConfig
from ..request import RequestCancelled, RequestEvent, RequestFailure, RequestStatus, VideoRequest, VideoResult
from .compile import WARM_UP_PROMPTS, graph_key
from .deadlines import DecodePrediction, Deadlines
from .first_swap import FirstSwap
from .layout import WorldLayout
from .rank_failure import RankGroupError
from . import sound_decode

EventCallback = Callable[[RequestEvent], None]
CancelCheck = Callable[[str], bool]  # request id -> cancelled
RetryCheck = Callable[[VideoRequest, BaseException], bool]  # True: the caller runs it again
Outcome = VideoResult | RequestFailure
ACO_ROUNDS = 5


class RequestPipeline:
    def __init__(self, executor, layout: WorldLayout, aco: str = "auto",
                 reliability: ReliabilityConfig = ReliabilityConfig(), rebuild: Callable[[], None] | None = None,
                 predict_decode: DecodePrediction | None = None, compiled: bool = False, sound: bool = False):
        """rebuild: tears the rank group down and starts a new one (sets self.executor).
        predict_decode: the planner's seconds for one decode of a shape on the decode GPUs.
        compiled: model.compile (the first forward of each new graph_key compiles its graphs)."""
        self.executor = executor
        self.rebuild = rebuild
        self.deadlines = Deadlines(reliability, predict_decode)
        self.layout = layout
        self.sound = sound  # the model makes sound (capabilities.has_sound): see .sound_decode
        self.aco_mode = aco  # the engine's policy; runs may override it
        self.aco_choice: dict[AcoShape, bool] = {}  # attention shape (text_len 0) -> Aco pays
        self.split_units: dict = {}  # VideoShape -> units of a split decode, asked once per shape
        # model.compile: the graph keys (video shape, guidance, image; compile.graph_key) this rank
        # group has compiled graphs for (None: eager).
        self.compiled_keys: set[tuple] | None = set() if compiled else None
        self.first_swap = FirstSwap()  # offloaded weights' first swap: its request's deadlines

    def warm_up(self, request: VideoRequest) -> None:
        """model.compile, on a new rank group: forwards of `request` (with each warm-up prompt) on
        the denoise ranks now, under rebuild_timeout_s, so that the configured shape's graphs,
        dynamic in the text length, are compiled before any request's step deadlines run (the group's ranks compile at their own pace: their
        operation deadline is widened meanwhile, as for a request's first forward)."""
        limit, ex = self.deadlines.config.rebuild_timeout_s, self.executor
        self.compiled_keys = set()
        with self.first_compile(graph_key(request), limit):
            # Two prompt lengths: the second makes the text dimension dynamic (compile.py), so
            # that no later prompt compiles inside an ordinary step.
            for prompt in WARM_UP_PROMPTS:
                warm = replace(request, prompt=prompt)
                cond = ex.call_rank(self.layout.text_rank, "encode_prompt", warm, timeout=limit)
                ex.call("begin", warm, cond, timeout=limit)
                ex.call("time_forward", False, timeout=limit)
                ex.call("drop_job", timeout=limit)

    @contextlib.contextmanager
    def first_compile(self, key: tuple, call_timeout: float | None = None) -> Iterator[None]:
        """model.compile: the first forward of a graph key this group has not run compiles its
        graphs, each rank at its own pace while its peers (and Aco helpers, waiting for headers)
        sit in collectives: for it every rank's operation deadline and the driver's call bound
        grow by first_compile_s. Back to the step deadline once it has run (a failure leaves the
        group to be rebuilt: nothing more is sent to it). call_timeout: the bound of the two
        deadline calls (None: call_s)."""
        deadlines = self.deadlines
        with deadlines.compiling():
            self.executor.call_all("set_op_deadline", deadlines.op_s, timeout=call_timeout or deadlines.call_s)
            yield
        self.executor.call_all("set_op_deadline", deadlines.op_s, timeout=call_timeout or deadlines.call_s)
        deadlines.sent_op_s = deadlines.op_s
        self.compiled_keys.add(key)

    def session(self, on_event: EventCallback, is_cancelled: CancelCheck,
                retry: RetryCheck | None = None) -> "_Run":
        """A long-lived run for requests that arrive over time (pipedit.runtime.engine_loop):
        `submit` one request at a time, `poll` for decodes that finished meanwhile, `recover`
        when it is `broken`. A failed request for which `retry` says True yields no outcome."""
        return _Run(self, on_event, True, self.aco_mode if self.layout.aco else "off", is_cancelled, retry)

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
            if run.broken:
                yield from run.recover()
        yield from run.drain()
        if run.broken:
            yield from run.recover()


@dataclass
class _Decoding:
    """A request whose latents a decode rank holds."""

    request: VideoRequest
    rank: int
    started: float  # when the request began (encode)
    handed: float  # when its latents were handed off
    timings: dict
    # The denoise ranks' `finish` calls: collected with the decode, so that no result ref (rank 0's
    # latents, with the object-store handoff) stays pinned in the executor's bookkeeping. A split
    # decode's other ranks' calls are collected with them (a failure there fails the request).
    finish: list = field(default_factory=list)
    helpers: tuple[int, ...] = ()  # the other decode ranks of a split decode, or of its sound (freed with `rank`)
    sound: object = None  # the call whose result is the sound track, when another decode rank decodes it


class _Run:
    """State of one `run` call: decodes in flight and free decode ranks."""

    def __init__(self, pipeline: RequestPipeline, emit: EventCallback, pipelined: bool, aco_mode: str,
                 is_cancelled: CancelCheck = lambda request_id: False, retry: RetryCheck | None = None):
        self.s = pipeline
        self.is_cancelled = is_cancelled
        self.retry = retry or (lambda request, error: False)
        self.deadlines = pipeline.deadlines
        self.layout = pipeline.layout
        self.emit = emit
        self.pipelined = pipelined
        self.aco_mode = aco_mode
        self.in_flight: dict = {}  # decode call ref -> _Decoding
        self.free = deque(self.layout.decode_ranks)
        self.shape_of: tuple = (None, None)  # (request id, its AcoShape)
        self.broken: RankGroupError | None = None  # the group failed: recover() before the next request

    @property
    def ex(self):
        return self.s.executor  # replaced by a rebuild

    def recover(self) -> Iterator[Outcome]:
        """After a group failure: decodes that still finish in time are kept, the others fail;
        then the group is rebuilt (RankGroupError if that fails; call again to retry)."""
        cause = self.broken
        yield from self._collect(block=True)
        for decoding in list(self.in_flight.values()):  # only left if the collect was cut short
            outcome = self._failed(decoding.request, "decode", cause)
            if outcome is not None:
                yield outcome
        self.in_flight.clear()
        if self.s.rebuild is None:
            raise RuntimeError(f"the rank group failed ({cause}) and this engine cannot rebuild it")
        self.s.rebuild()
        self.deadlines.sent_op_s = None  # new ranks start at the floor: tell them again
        self.s.first_swap.new_group()  # and have swapped nothing yet
        self.free = deque(self.layout.decode_ranks)
        self.shape_of = (None, None)
        self.broken = None

    def submit(self, request: VideoRequest) -> Iterator[Outcome]:
        phase, started = "encode", time.perf_counter()
        timings: dict[str, float] = {}
        try:
            self._check_cancelled(request)
            self.emit(RequestEvent(request.request_id, RequestStatus.ENCODING))
            cond = self.ex.call_rank(self.layout.text_rank, "encode_prompt", request,
                                     timeout=self.deadlines.encode_s(request.shape, request.image is not None))
            timings["encode_s"] = time.perf_counter() - started
            phase = "denoise"
            yield from self._denoise(request, cond, timings)
            phase = "decode"
            self._check_cancelled(request)
            outcome = yield from self._hand_off(request, timings, started)
            if outcome is not None:
                yield outcome
        except Exception as error:  # noqa: BLE001 - one request's failure must not stop the rest
            outcome = self._failed(request, phase, error)
            if outcome is not None:
                yield outcome

    def _denoise(self, request: VideoRequest, cond, timings: dict) -> Iterator[Outcome]:
        # Host clocks time device work here because every rank call ends with a wait for its
        # device (pipedit.device_time): encode, each step, each timed forward, the decode.
        start = time.perf_counter()
        total = self.ex.call("begin", request, cond, timeout=self.deadlines.call_s)[0]
        self.emit(RequestEvent(request.request_id, RequestStatus.DENOISING, 0, total))
        aco_steps = 0
        with self.s.first_swap.around_steps(self.ex, self.deadlines) as swapping:
            for index in range(total):
                self._check_cancelled(request)  # between steps: a cancelled request stops within one
                key = graph_key(request)
                compiles = index == 0 and self.s.compiled_keys is not None and key not in self.s.compiled_keys
                with self.s.first_compile(key) if compiles else contextlib.nullcontext():
                    use_aco = self._aco_now(request)  # may time forwards (Aco's measurement): inside too
                    step_start = time.perf_counter()
                    done = self._step(request, use_aco)
                if not (compiles or swapping):  # a compiling or first-swapping forward's time is no step time
                    self._observe_step(time.perf_counter() - step_start)
                aco_steps += use_aco
                self.emit(RequestEvent(request.request_id, RequestStatus.DENOISING, done, total))
                yield from self._collect(block=False)
                self._check_group()
        timings["denoise_s"] = time.perf_counter() - start
        timings["aco_steps"] = aco_steps
        # Guidance branches per step, and the step cache's evaluations computed and skipped.
        timings.update(self.ex.call_rank(0, "job_report", timeout=self.deadlines.call_s))

    def _hand_off(self, request: VideoRequest, timings: dict, started: float):
        self.emit(RequestEvent(request.request_id, RequestStatus.DECODING))
        if not self.layout.decode:
            start = time.perf_counter()
            result = self.ex.call("finish", timeout=self.deadlines.decode_s(request.shape))[0]
            timings["decode_s"] = time.perf_counter() - start
            return self._done(request, result, timings, started)
        while not self.free:
            self._check_group()
            yield from self._collect(block=True, first_only=True)
        self._check_group()
        split = self._split_now(request)
        timings["decode_ranks"] = len(split) if split else 1
        rank = split[0] if split else self.free.popleft()
        beside = sound_decode.sound_rank(self.free, self.s.sound, split)  # the sound's own decode rank, if free
        finish = self.ex.submit("finish", rank, *beside)
        latents = finish[0] if self.layout.handoff == "object_store" else None
        if split:  # every decode rank at once; the lead (first) receives the latents, returns the frames
            self.free.clear()
            ref = self.ex.submit_rank(rank, "decode_split", request, latents)
            finish += [self.ex.submit_rank(r, "decode_split", request, None) for r in split[1:]]
            sound = finish[-1] if self.s.sound else None  # the last decode rank's: the sound
        else:
            ref, sound = sound_decode.submit(self.ex, request, rank, latents, beside)
        self.in_flight[ref] = _Decoding(request, rank, started, time.perf_counter(), timings, finish,
                                        split[1:] or beside, sound)
        if not self.pipelined:
            yield from self._collect(block=True)
        return None

    def _split_now(self, request: VideoRequest) -> tuple[int, ...]:
        """The decode ranks to split this video's decode over (lead first), or () for one rank:
        split only when every decode rank is idle (nothing in flight: no queue to serve, so
        latency wins) and the video has at least two units to share."""
        ranks = self.layout.decode_ranks
        if not self.layout.split_decode or self.in_flight or len(self.free) < len(ranks):
            return ()
        if request.shape not in self.s.split_units:  # asked once per video shape
            self.s.split_units[request.shape] = self.ex.call_rank(ranks[0], "split_units", request,
                                                                  timeout=self.deadlines.call_s)
        return ranks if self.s.split_units[request.shape] >= 2 else ()

    def _collect(self, block: bool, first_only: bool = False) -> Iterator[Outcome]:
        while self.in_flight:
            overdue = self._overdue()
            if block and not overdue:
                first_due = min(d.handed + self.deadlines.decode_s(d.request.shape) for d in self.in_flight.values())
                ref = self.ex.wait_one(list(self.in_flight), timeout=max(0.0, first_due - time.perf_counter()))
                ready = [ref] if ref is not None else []
                overdue = [] if ready else self._overdue()
            else:
                ready = self.ex.ready(list(self.in_flight))
            for ref in ready:
                yield from self._collected(ref)
            for ref in overdue:
                if ref in self.in_flight:
                    yield from self._hung_decode(ref)
            if not (ready or overdue) and not block:
                return
            if (first_only and ready) or not block:
                return

    def _overdue(self) -> list:
        now = time.perf_counter()
        return [ref for ref, d in self.in_flight.items() if now - d.handed > self.deadlines.decode_s(d.request.shape)]

    def _collected(self, ref) -> Iterator[Outcome]:
        decoding = self.in_flight.pop(ref)
        self.free.extend((decoding.rank, *decoding.helpers))
        try:
            result = self.ex.get(ref)
            sound_decode.attach(self.ex, result, decoding.sound, self.deadlines.decode_s(decoding.request.shape))
            self.ex.get(decoding.finish)  # done long ago (the decode had its latents)
            self._check_cancelled(decoding.request)  # a cancelled decode is discarded
            decoding.timings["decode_s"] = time.perf_counter() - decoding.handed
            self.deadlines.observe_decode(decoding.timings["decode_s"])
            yield self._done(decoding.request, result, decoding.timings, decoding.started)
        except Exception as error:  # noqa: BLE001
            outcome = self._failed(decoding.request, "decode", error)
            if outcome is not None:
                yield outcome

    def _hung_decode(self, ref) -> Iterator[Outcome]:
        decoding = self.in_flight.pop(ref)
        error = RankGroupError(f"decode rank {decoding.rank} did not finish decode within "
                               f"{self.deadlines.decode_s(decoding.request.shape):.1f} s (hung); the rank group is "
                               f"rebuilt", decoding.rank)
        outcome = self._failed(decoding.request, "decode", error)
        if outcome is not None:
            yield outcome

    def poll(self) -> Iterator[Outcome]:
        """Outcomes of decodes that finished, without waiting."""
        yield from self._collect(block=False)

    def drain(self) -> Iterator[Outcome]:
        yield from self._collect(block=True)

    def _check_group(self) -> None:
        """A decode that failed the group meanwhile fails this request too (the rebuild ends it)."""
        if self.broken is not None:
            raise RankGroupError(f"the rank group failed meanwhile: {self.broken}")

    def _check_cancelled(self, request: VideoRequest) -> None:
        if self.is_cancelled(request.request_id):
            raise RequestCancelled(request.request_id)

    def _done(self, request, result: VideoResult, timings: dict, started: float) -> VideoResult:
        result.timings.update(timings, latency_s=time.perf_counter() - started)
        self.emit(RequestEvent(request.request_id, RequestStatus.DONE))
        return result

    def _failed(self, request, phase: str, error: BaseException) -> RequestFailure | None:
        """The failure to report, or None when the request is handed back to be retried."""
        if isinstance(error, RankGroupError) and error.rebuild and self.broken is None:
            self.broken = error
        cancelled = isinstance(error, RequestCancelled)
        if not cancelled and self.retry(request, error):
            self.emit(RequestEvent(request.request_id, RequestStatus.QUEUED))
            return None
        self.emit(RequestEvent(request.request_id, RequestStatus.CANCELLED if cancelled else RequestStatus.FAILED))
        return RequestFailure(request.request_id, phase, error)

    def _observe_step(self, seconds: float) -> None:
        """Raises the ranks' operation deadline when steps turn out slower than it allows for."""
        if self.deadlines.observe_step(seconds):
            op_s = self.deadlines.op_s
            self.ex.call_all("set_op_deadline", op_s, timeout=self.deadlines.call_s)
            self.deadlines.sent_op_s = op_s

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
            shape = self.ex.call_rank(0, "aco_shape", request, timeout=self.deadlines.call_s)
            self.shape_of = (request.request_id, shape)
        return self.shape_of[1]

    def _step(self, request: VideoRequest, use_aco: bool) -> int:
        if not use_aco:
            return self.ex.call("step", False, timeout=self.deadlines.call_s)[0]
        return self._with_helpers("step", True, self._aco_shape(request))[0]

    def _with_helpers(self, method: str, arg, shape: AcoShape) -> list:
        """Runs `method(arg)` on the denoise ranks while the decode ranks serve Aco heads for one
        forward; returns the denoise ranks' results.

        If a denoise rank fails inside this forward, the helpers wait for messages that never
        come: the failure (or their own operation deadline) breaks the run and the rebuild kills
        them, so no stale helper call runs beside the next request's."""
        helpers = [self.ex.submit_rank(r, "aco_serve", shape) for r in self.layout.decode_ranks]
        denoise = self.ex.submit(method, arg)
        return self.ex.get(denoise + helpers, self.deadlines.call_s)[: self.layout.denoise]

    def _measure_aco(self, shape: AcoShape) -> bool:
        """Interleaved rounds of one forward without and with Aco (slowest rank per sample); the
        first round warms up. Aco wins only as pick_faster decides: clearly and consistently."""
        samples: dict = {None: [], True: []}
        for _ in range(ACO_ROUNDS + 1):
            samples[None].append(max(self.ex.call("time_forward", False, timeout=self.deadlines.call_s)))
            samples[True].append(max(self._with_helpers("time_forward", True, shape)))
        return pick_faster({key: times[1:] for key, times in samples.items()}) is True
