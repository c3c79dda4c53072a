"""Runs every rank of a layout, one after another in this process, through the engine's own
worker code (DenoiseWorker, DecodeWorker) on fake tensors, as the scheduler drives them for a
queue of requests:

  text rank      encode_prompt (HunyuanVideo: the first decode rank; OpenSoraPlan: rank 0); on a
                 decode rank its peak counts on top of the decode's (the next request's encode
                 overlaps a decode) and is kept out of the tiling decision
  denoise ranks  setup, begin, `steps` steps (with Aco helpers: every other step, starting with
                 the first, hands heads to the helpers), then rank 0 hands the latents to every
                 decode rank in turn (one request each: what a queue makes them do), or decodes
                 them itself without decode ranks
  decode ranks   setup, one aco_serve per Aco step, one decode (its latents from rank 0), and
                 with split_decode (>= 2 decode ranks) one video split over all of them
                 (decode_split: the lead receives from rank 0, broadcasts, gathers the pieces);
                 its peak per rank is reported apart (split_peak_bytes)

Values another rank would have sent through Ray (the prompt condition, the Aco shape) are
fresh fake tensors of the right shapes on the receiving rank, made from a probe: a text-only
adapter encodes the prompt once before the ranks run.

Seams (all inside the dry run): the worker's process-group start is the fake group's; the
adapter's prepare_condition runs on host data (it reads the valid text length: a value, which
fake tensors do not have), and so do the scheduler's construction and steps (sigma tables read
with .item(), the step index found with nonzero()): their arithmetic on the fake latents stays
fake, an ancestral step's noise is a real host tensor (latent-sized, not counted); so is Wan2.2
A14B's expert choice (it reads the timestep); HunyuanVideo's tiling decision sees the GPU
profile's capacity minus what the rank holds (the decode's CUDA path), not the CPU's "never tile";
with several decode ranks every one decides on the tightest one's (runtime.decode_budget), as in
the engine: each decode rank is loaded once more beforehand to measure it.
Wan2.2 A14B with model.idle_expert offload: the idle expert's weights are not counted (they stand
in host memory; the adapter moves nothing on the dry run's CPU device); host_bytes counts its
files' bytes, in the files' dtype.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..adapter import load_adapter
from ..mapped_weights import checkpoint_bytes
from ..config import EngineConfig
from ..request import VideoRequest
from ..runtime.layout import WorldLayout
from ..runtime.rank import encode_request
from .cache_decisions import scripted_decisions
from .fakeworld import device_path, fake_tensors, rank_group, remembered_values
from .memory import StorageCounter
from .models import fake_loading
from .recorder import Recorder


@dataclass
class RankResult:
    rank: int
    role: str  # "denoise" or "decode"
    cfg_group: int | None  # guidance branch (CFG parallel), else None
    helper: bool  # serves Aco heads
    holds: list[str]  # model parts
    peak_bytes: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    tiled: bool | None = None  # the VAE decode's tiling decision, where this rank decoded
    split_peak_bytes: int | None = None  # peak during a decode split over the decode group
    # Weights this rank keeps in host memory, not on the GPU: Wan2.2 A14B's idle expert under
    # model.idle_expert offload, as views of its memory-mapped checkpoint files (the page cache
    # holds one copy per node, shared by every rank that maps the same files), in the files' bytes.
    host_bytes: int = 0


class _Tiling:
    """VAE decodes that decide tiling from the free CUDA memory (the families' dry_run.tiling
    modules: HunyuanVideo's): the dry run answers with the profile's capacity minus what the rank
    holds, and remembers the decision."""

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self.counter: StorageCounter | None = None
        self.decided: bool | None = None

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        import importlib

        from pipedit import families

        modules = [importlib.import_module(entry.dry_run.tiling) for entry in families.families()
                   if entry.dry_run.tiling]
        saved = [(module, module.should_tile, module.free_device_bytes) for module in modules]

        def free(device):
            return int(self.capacity - (self.counter.live_bytes() if self.counter else 0))

        for module, should_tile, _ in saved:
            def decide(mode, device, predicted, free_bytes, should_tile=should_tile):
                self.decided = should_tile(mode, "cuda", predicted, free_bytes)
                return self.decided

            module.should_tile, module.free_device_bytes = decide, free
        try:
            yield
        finally:
            for module, should_tile, free_device_bytes in saved:
                module.should_tile, module.free_device_bytes = should_tile, free_device_bytes


def _on_host(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with unset_fake_temporarily():
            return fn(*args, **kwargs)
    return call


class _HostTimesteps:
    """The timesteps a job indexes, handed out as host tensors: indexing a real tensor inside the
    fake mode would give a fake one, whose value the rank code may read (Wan2.2 A14B picks its
    expert with float(timestep))."""

    def __init__(self, timesteps: torch.Tensor) -> None:
        self.timesteps = timesteps

    def __len__(self) -> int:
        return len(self.timesteps)

    def __getitem__(self, index):
        with unset_fake_temporarily():
            return self.timesteps[index].clone()


def _host_scheduler(make):
    """Schedulers read their tables' values (.item(), nonzero() for the step index): they are
    built and stepped on host data; their arithmetic on the fake latents stays fake."""
    def call(sampling):  # the adapter's make_scheduler(SamplingParams)
        scheduler, timesteps = _on_host(make)(sampling)
        if hasattr(scheduler, "set_begin_index"):  # the job starts at step 0; the index from the
            scheduler.set_begin_index(0)  # (fake) timestep would need its value (nonzero)
        for name in ("step", "scale_model_input"):
            if hasattr(scheduler, name):
                setattr(scheduler, name, _on_host(getattr(scheduler, name)))
        return scheduler, _HostTimesteps(timesteps)
    return call


def _received(cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a rank gets through Ray: new tensors of the same shapes (masks as real host data)."""
    out = {}
    for key, value in cond.items():
        if "mask" in key:
            with unset_fake_temporarily():
                out[key] = torch.ones(value.shape, dtype=value.dtype)
        else:
            out[key] = torch.empty(value.shape, dtype=value.dtype)
    return out


def _weights(adapter) -> list[torch.Tensor]:
    found = []
    for module in adapter.components.values():
        if isinstance(module, torch.nn.Module):
            found += list(module.parameters()) + list(module.buffers())
    return found


def _peak_during(counter: StorageCounter, body) -> int:
    """The peak of live bytes while `body` runs; the counter's own peak stays the overall one."""
    before = (counter.peak, counter._at_peak)
    counter.peak = counter.current
    body()
    during = counter.peak
    if before[0] >= during:
        counter.peak, counter._at_peak = before
    return during


class WorldRun:
    def __init__(self, config: EngineConfig, layout: WorldLayout, model_path: str, request: VideoRequest,
                 capacity: float) -> None:
        self.config, self.layout, self.model_path, self.request = config, layout, model_path, request
        self.recorder = Recorder()
        self.tiling = _Tiling(capacity)
        self.aco_steps = [i for i in range(request.steps) if layout.aco and i % 2 == 0]
        self.cond: dict[str, torch.Tensor] = {}
        self.aco_shape = None
        self.split_peaks: dict[int, int] = {}  # decode rank -> peak bytes during the split decode
        self.decode_budget: int | None = None  # the decode ranks' common budget (runtime.decode_budget)
        self.host_bytes: dict[int, int] = {}  # rank -> weights kept in host memory (RankResult.host_bytes)
        self.encode_peaks: dict[int, int] = {}  # the text rank -> its encode's peak above what it holds
        self.decode_overlaps: dict[int, int] = {}  # decode rank -> its decode's peak with an encode beside

    def run(self) -> list[RankResult]:
        with fake_tensors(), fake_loading(), device_path(), remembered_values(), self.tiling.patched(), \
                scripted_decisions():
            self._probe_condition()
            self.decode_budget = self._decode_budget()
            results = [self._rank(r, self._denoise) for r in self.layout.denoise_ranks]
            results += [self._rank(r, self._decode) for r in self.layout.decode_ranks]
        return results

    def _probe_condition(self) -> None:
        model = self.config.model
        probe = load_adapter(self.model_path, parts=self.layout.parts(self.layout.text_rank), device="cpu",
                             dtype=model.torch_dtype(), model=model.name, text_encoder_path=model.text_encoder_path)
        self.cond = {k: torch.empty(v.shape, dtype=v.dtype) for k, v in encode_request(probe, self.request).items()}

    def _decode_budget(self) -> int | None:
        """The engine's rule (runtime.decode_budget): the tightest decode rank's free memory once
        its parts are loaded, fixed on every decode rank. Each is measured on a load of its own,
        whose collectives go to a recorder nobody reads."""
        from ..runtime.decode_budget import tightest
        from ..runtime.decode_worker import DecodeWorker

        if len(self.layout.decode_ranks) < 2:
            return None
        free = []
        for rank in self.layout.decode_ranks:
            counter = StorageCounter()
            self.tiling.counter = counter
            with rank_group(rank, self.layout.world_size), Recorder().patched(rank, counter), counter:
                worker = DecodeWorker(self.config, self.layout, rank)
                worker._init_process_group = lambda rendezvous: None
                worker.setup(self.model_path)
                if rank == self.layout.text_rank:
                    self._reserve_encode(worker, counter)
                free.append(worker.decode_free_bytes())
                worker.close()
                del worker
                gc.collect()
        self.tiling.counter = None
        return tightest(free)

    def _result(self, rank: int) -> RankResult:
        layout = self.layout
        decode = rank >= layout.denoise
        cfg = rank // (layout.ulysses * layout.ring) if layout.cfg > 1 and not decode else None
        return RankResult(rank, "decode" if decode else "denoise", cfg, decode and layout.aco,
                          sorted(layout.parts(rank)))

    def _rank(self, rank: int, body) -> RankResult:
        result = self._result(rank)
        counter = StorageCounter()
        self.tiling.counter, self.tiling.decided = counter, None
        with rank_group(rank, self.layout.world_size), self.recorder.patched(rank, counter), counter:
            body(rank, counter)
            gc.collect()
        result.peak_bytes, result.by_kind, result.tiled = counter.peak, counter.peak_by_kind(), self.tiling.decided
        result.peak_bytes = max(result.peak_bytes, self.decode_overlaps.get(rank, 0))
        result.split_peak_bytes = self.split_peaks.get(rank)
        result.host_bytes = self.host_bytes.get(rank, 0)
        return result

    def _worker(self, cls, rank: int, counter: StorageCounter):
        worker = cls(self.config, self.layout, rank)
        worker._init_process_group = lambda rendezvous: None  # rank_group started the fake group
        worker.setup(self.model_path)
        worker.adapter.prepare_condition = _on_host(worker.adapter.prepare_condition)
        worker.adapter.make_scheduler = _host_scheduler(worker.adapter.make_scheduler)
        experts = worker.adapter.expert_set  # Wan2.2 A14B: the expert of a step
        if experts is not None:  # is chosen from the timestep's value (host data, _HostTimesteps)
            experts.index_for = _on_host(experts.index_for)
        counter.tag(_weights(worker.adapter), "weights")
        self._host_idle_expert(worker, rank, counter)
        if self.decode_budget is not None and rank in self.layout.decode_ranks:
            worker.fix_decode_budget(self.decode_budget)
        if rank == self.layout.text_rank:
            self._reserve_encode(worker, counter)
            counter.tag_live_as_state()
        return worker

    def _reserve_encode(self, worker, counter: StorageCounter) -> None:
        """Runs the text rank's encode and keeps its peak above what the rank held before: on a
        decode rank the next request's encode overlaps a decode (DeDiVAE), so the adapter keeps
        it out of its decode decisions (as DecodeWorker.reserve_encode does on a GPU) and the
        decode's peak counts it on top (_decode)."""
        before = counter.current
        peak = _peak_during(counter, lambda: worker.encode_prompt(self.request))
        self.encode_peaks[worker.rank] = peak - before
        if worker.rank in self.layout.decode_ranks:
            worker.adapter.reserve_for_encode(peak - before)

    def _host_idle_expert(self, worker, rank: int, counter: StorageCounter) -> None:
        """model.idle_expert offload: the idle expert waits in host memory (its checkpoint files,
        mapped), so one expert's weights count at any time. The adapter does not move anything on
        a CPU device (the dry run's): its storages are uncounted here, and its host bytes are its
        files' (in their own dtype: float32 files hold twice a bf16 module's bytes), or the
        module's where the checkpoint has no safetensors files (released configs: no files)."""
        experts = worker.adapter.experts if "dit" in self.layout.parts(rank) else []
        if getattr(self.config.model, "idle_expert", "resident") == "offload" and len(experts) > 1:
            names = {id(module): name for name, module in worker.adapter.components.items()}
            for idle in experts[1:]:
                tensors = list(idle.parameters()) + list(idle.buffers())
                files = checkpoint_bytes(Path(self.model_path) / names[id(idle)])
                held = files if files is not None else sum(t.nbytes for t in tensors)
                self.host_bytes[rank] = self.host_bytes.get(rank, 0) + held
                counter.forget(tensors)

    def _denoise(self, rank: int, counter: StorageCounter) -> None:
        from ..runtime.worker import DenoiseWorker

        worker = self._worker(DenoiseWorker, rank, counter)
        worker.begin(self.request, _received(self.cond))
        if rank == 0 and self.layout.aco:
            self.aco_shape = worker.aco_shape(self.request)
        counter.tag_live_as_state()
        for step in range(self.request.steps):
            worker.step(aco=step in self.aco_steps)
            counter.tag_live_as_state()
        job = worker.job
        for decode_rank in self.layout.decode_ranks if rank == 0 else ():
            worker.job = job  # one request per decode rank: a queue's steady state
            worker.finish(decode_rank)
        if rank == 0 and self.layout.split_decode:  # then one video split over the whole group
            worker.job = job
            worker.finish(self.layout.decode_ranks[0])
        if not self.layout.decode_ranks or rank != 0:
            worker.finish()
        worker.close()

    def _decode(self, rank: int, counter: StorageCounter) -> None:
        from ..runtime.decode_worker import DecodeWorker

        worker = self._worker(DecodeWorker, rank, counter)
        for _ in self.aco_steps:
            worker.aco_serve(self.aco_shape)
            counter.tag_live_as_state()
        decode_peak = _peak_during(counter, lambda: worker.decode(self.request, None))
        if rank == self.layout.text_rank:  # the next request's encode runs beside this decode
            self.decode_overlaps[rank] = decode_peak + self.encode_peaks.get(rank, 0)
        if self.layout.split_decode:
            self.split_peaks[rank] = _peak_during(counter, lambda: worker.decode_split(self.request, None))
        worker.close()
