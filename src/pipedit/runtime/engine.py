"""The engine: turns VideoRequests into VideoResults on the configured ranks.

It plans the world (denoise and decode ranks, see pipedit.planner), starts the executor
(in-process for one rank, Ray actors for several) and runs requests through the request pipeline,
which pipelines denoising and decoding across requests.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Iterator

from ..adapter import adapter_class_for, attention_heads, model_inputs
from ..config import EngineConfig
from ..errors import UserInputError
from .calibration import resolve_parallel
from .cfg_parallel import check_cfg_capable
from ..request import RequestFailure, VideoRequest, VideoResult
from ..images import placeholder_for
from .decode_budget import fix_decode_budget
from .executor import create_executor, fault_env
from .layout import WorldLayout
from .request_pipeline import EventCallback, Outcome, RequestPipeline
from .sequence_parallel import check_parallel_config

_log = logging.getLogger(__name__)


def resolve_model_path(path: str | None, model: str | None = None) -> Path:
    """The checkpoint folder the driver plans from; without a path, the tiny demo checkpoint of
    `model`'s family; a hub id: its snapshot with the configs only (the ranks fetch the weights)."""
    if path:
        from ..hub import model_configs

        return model_configs(path)
    from ..families import demo_model

    return demo_model(model)


class Engine:
    def __init__(self, config: EngineConfig):
        self.config = config
        model_path = str(resolve_model_path(config.model.path, config.model.name))
        adapter_class = adapter_class_for(model_path, config.model.name)
        heads = attention_heads(model_path, config.model.name)
        parallel = resolve_parallel(config, model_path, heads)
        check_parallel_config(parallel, heads)
        if parallel.cfg_parallel:
            check_cfg_capable(adapter_class)  # before any rank starts
        self.parallel = parallel
        self.layout = WorldLayout.from_config(parallel, adapter_class.preferred_text_encoder)
        self._model_path = model_path
        self._fault_env = fault_env()  # one `once` folder for every rank group this engine starts
        capabilities = model_inputs(model_path, config.model.name).capabilities
        self.needs_image = capabilities.needs_image  # image-to-video
        if self.layout.ring > 1 and not adapter_class.capabilities.ring:
            raise UserInputError(f"{adapter_class.family} attends over a head's whole sequence (sparse layers), which "
                                 f"ring attention splits: use --ulysses {self.layout.ulysses * self.layout.ring} --ring 1")
        self.executor = self._start_group()
        try:
            self.pipeline = RequestPipeline(self.executor, self.layout, parallel.aco, config.reliability,
                                            self.rebuild, self._decode_prediction(), compiled=config.model.compile,
                                            sound=capabilities.has_sound)
            self._warm_up()
        except BaseException:
            self.executor.close()
            raise

    def _decode_prediction(self):
        """The planner's decode time on the GPU that decodes (None on CPU ranks, or where the
        checkpoint's configs are not ones the planner reads: then the configured floor applies)."""
        gpu = self.executor.call_rank(self.layout.world_size - 1, "device_name")
        if gpu is None:
            return None
        from ..planner.models import family_of, from_checkpoint
        from .decode_prediction import decode_predictor

        try:
            return decode_predictor(from_checkpoint(self._model_path, family_of(self._model_path)), gpu)
        except Exception:  # noqa: BLE001 - a bound, not a requirement: the floor still applies
            _log.warning("no decode-time prediction for %s; the first decode is bounded by the floor",
                         self._model_path, exc_info=True)
            return None

    def rebuild(self) -> None:
        """Tears the rank group down (kills its processes, which also clears any stuck
        collective) and starts a new one with the same layout."""
        old, self.executor = self.executor, None
        if old is not None:  # None: a previous rebuild failed after closing it
            try:
                old.close()
            except Exception:  # noqa: BLE001 - its processes may be gone already
                _log.exception("closing the failed rank group")
        self.executor = self.pipeline.executor = self._start_group()
        self._warm_up()

    def _warm_up(self) -> None:
        """model.compile: the configured video shape's graphs compile now, on the new group."""
        if self.config.model.compile:
            self.pipeline.warm_up(self._configured_request())

    def _configured_request(self) -> VideoRequest:
        """A request of the configured generation (a placeholder image for image-to-video)."""
        g = self.config.generation
        request = VideoRequest("a red fox running through snow", height=g.height, width=g.width,
                               num_frames=g.num_frames, steps=g.steps, guidance_scale=g.guidance_scale)
        return placeholder_for(request, self.needs_image)

    def _start_group(self):
        """A new rank group, its decode ranks deciding decodes on one memory budget (less an
        encode's peak where the text encoders share a decode rank: the next request's encode runs
        there during a decode)."""
        executor = create_executor(self.config, self._model_path, self.layout, self._fault_env)
        try:
            if self.layout.text_rank in self.layout.decode_ranks:
                executor.call_rank(self.layout.text_rank, "reserve_encode", self._configured_request(),
                                   timeout=self.config.reliability.rebuild_timeout_s)
            limit = self.config.reliability.op_deadline_floor_s  # two quick calls per decode rank
            fix_decode_budget(self.layout.decode_ranks,
                              lambda rank, method, *args: executor.call_rank(rank, method, *args, timeout=limit))
        except BaseException:
            executor.close()  # a rebuild retries with a new group: never leave this one's ranks running
            raise
        return executor

    def generate_many(self, requests: Iterable[VideoRequest], on_event: EventCallback | None = None,
                      **options) -> Iterator[Outcome]:
        """VideoResult or RequestFailure per request, in completion order."""
        return self.pipeline.run(list(requests), on_event, **options)

    def generate(self, request: VideoRequest, on_event: EventCallback | None = None) -> VideoResult:
        (outcome,) = self.generate_many([request], on_event)
        if isinstance(outcome, RequestFailure):
            raise outcome.error
        return outcome

    def close(self) -> None:
        """Ends the rank group; one that closes cleanly inside kept_ranks.reuse_rank_processes() is
        kept for the next engine with the same ranks."""
        if self.executor is not None:
            self.executor.close(keep_ranks=True)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
