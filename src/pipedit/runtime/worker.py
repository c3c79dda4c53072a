"""A denoise worker: one rank of the sequence-parallel DiT group.

The same class runs in-process (a world of one rank) and inside Ray actors (one per GPU). The
engine drives it with plain dataclasses: encode_prompt (on the text rank), begin, step, finish.
"""

from __future__ import annotations

import time

import torch

from .. import device_time
from ..attention.aco import AcoShape
from ..cache.session import WorkerCache
from ..distributed import p2p
from ..lora.host_copies import rebind
from ..lora.slots import SlotLoras
from ..lora.switch import RankLoras
from ..request import VideoRequest, VideoResult
from .denoise import DenoiseJob
from .rank import RankWorker
from .cfg_parallel import CfgParallelPredictor
from .sequence_parallel import SequenceParallelRuntime
from ..attention.kernel_choice import check_kernel_setting
from ..distributed.context import ParallelContext
from .fp8 import quantize_fp8
from .. import families


class DenoiseWorker(RankWorker):
    sp: SequenceParallelRuntime | None = None
    job: DenoiseJob | None = None
    _pending_send = None
    predict = None  # None: the adapter's own predict_noise
    offload_idle = False  # without decode ranks: keep the idle module (DiT or VAE) on the host

    def setup(self, model_path: str, rendezvous: str | None = None) -> None:
        self._join(model_path, rendezvous)
        # Adapters are final before the shard plan's hooks and compile: under compile, named
        # adapters switch through fixed slots (pipedit.lora.slots: no recompile at a switch).
        switching = SlotLoras if self.config.model.compile and self.config.model.offered_loras else RankLoras
        self.loras = switching(self.adapter.components, self.config.model, self.device)
        self.lora_switch_s = 0.0  # the current job's adapter activation (moves to the device included)
        if self.layout.cfg > 1:
            self.predict = CfgParallelPredictor(self.adapter, self.ctx)
        model = self.config.model
        check_kernel_setting(model.attention, self.device.type, self.adapter.compute_dtype)
        if model.quantize == "fp8":  # after fused adapters, before the processors and compile
            quantize_fp8(self._transformers(), self.device, families.family(self.adapter.family).fp8_keep)
        ctx = self.ctx if self.ctx is not None else ParallelContext.single(self.device)
        self.sp = SequenceParallelRuntime.install(self.adapter, ctx, self.layout, self.config.parallel, model.attention)
        if self.config.model.compile:  # after the attention processors are final, before any block wrapper
            from .compile import apply_compile

            self.adapter.check_compile()
            for transformer in self._transformers():
                apply_compile(transformer, self.device)
        # Step caching agrees its decisions over every denoise rank; Aco helpers hear of skips.
        on_skip = self.sp.strategy.end_forward if self.sp is not None and self.sp.aco_capable else None
        groups = (self.ctx.sp_group, self.ctx.cfg_group) if self.ctx is not None else ()
        self.cache = WorkerCache(self.adapter, groups, on_skip, self.state)

    def num_heads(self) -> int:
        return self.adapter.num_heads

    def aco_shape(self, request: VideoRequest) -> AcoShape:
        """What Aco helpers receive per attention call of the current job (a Ulysses rank holds
        the whole video sequence for its heads; text is as long as this prompt's tokens)."""
        attention = self.adapter.attention_shape(request.shape)
        text_len = self.adapter.text_length(self.job.cond)
        return AcoShape(attention.seq_len, text_len, attention.head_dim, self.adapter.compute_dtype)

    def pipesp_chunk(self) -> int | None:
        """Heads per PipeSP chunk the attention runs with now (None: synchronous or no Ulysses)."""
        return getattr(self.sp.strategy, "chunk_heads", None) if self.sp is not None else None

    def set_offload_idle(self, enabled: bool) -> bool:
        """The sequential baseline's offload (no decode ranks): the VAE waits on the host while
        the DiT denoises, the DiT while the VAE decodes. Returns whether it moves anything (not
        on a CPU device, nor on ranks without the VAE)."""
        self.offload_idle = enabled and self.layout.decode == 0 and self.device.type != "cpu" and "vae" in self.adapter.components
        if self.offload_idle:
            self.adapter.components["vae"].to("cpu")
        return self.offload_idle

    def _transformers(self) -> list:
        """Every DiT this rank holds (Wan2.2 A14B: two experts)."""
        return list(self.adapter.experts)

    def _decode_offloaded(self, latents: torch.Tensor) -> torch.Tensor:
        # Only the DiTs' tensors on the device leave, and only they come back: an offloaded idle
        # expert and the LoRA adapters the LRU evicted already wait on the host (their host
        # copies stay as they are), and must not come back behind the LRU's back.
        resident = [t for dit in self._transformers() for t in (*dit.parameters(), *dit.buffers())
                    if t.device == self.device]
        vae = self.adapter.components["vae"]
        for tensor in resident:
            rebind(tensor, tensor.data.to("cpu"))
        vae.to(self.device)
        try:
            return self.adapter.decode(latents)
        finally:
            vae.to("cpu")
            for tensor in resident:
                rebind(tensor, tensor.data.to(self.device))

    def first_swap_bytes(self) -> int:
        """Bytes this rank's first swap of offloaded weights reads from their files (0: none)."""
        return self.adapter.first_swap_bytes()

    # -- one request ----------------------------------------------------------------------
    def begin(self, request: VideoRequest, cond: dict[str, torch.Tensor]) -> int:
        self.adapter.validate(request.shape, request.steps)
        started = time.perf_counter()
        self.loras.activate(request)  # every denoise rank, from the request: in lockstep
        self.lora_switch_s = time.perf_counter() - started
        cond = {k: v.to(self.device) for k, v in self.adapter.prepare_condition(cond).items()}
        if self.sp is not None:
            self.sp.prepare(self.adapter, request)
        job = DenoiseJob.start(self.adapter, request, cond, self.predict)
        job.cache = self.cache.new_state(request.cache, self.config.generation.cache, job.total_steps)
        self.job = job
        return self.job.total_steps

    def step(self, aco: bool = False) -> int:
        self.state.faults.enter(phase="denoise", step=self.job.steps_done, aco=aco, prompt=self.job.request.prompt)
        self.state.faults.check()
        self._set_aco(aco)
        try:
            with self.cache.running(self.job.cache):
                self.job.step(self.adapter)
            self._end_aco_forward(aco)
            self.state.deadline.settle()  # device-side ops of this step completed in time
            # The step's end, and only there (never inside it): the driver's clock, which times
            # steps, deadlines and denoise_s, then covers the device work. After settle: no
            # collective is left that could hang the wait.
            device_time.wait_for_device(self.device)
        finally:
            self._set_aco(False)
        return self.job.steps_done

    def drop_job(self) -> None:
        """Forgets the current job (model.compile's warm-up: it ran one forward, nothing more)."""
        self.job = None

    def _set_aco(self, active: bool) -> None:
        if active and not (self.sp is not None and self.sp.aco_capable):
            raise RuntimeError("this world has no Aco helpers (no decode ranks, or ring > 1)")
        if self.sp is not None and self.sp.aco_capable:
            self.sp.strategy.set_active(active)

    def _end_aco_forward(self, aco: bool) -> None:
        """The Aco helpers serve a step until this end (unless a step cache's skip ended it)."""
        if aco:
            self.sp.strategy.end_forward()

    def job_report(self) -> dict[str, float]:
        """The current job's timings besides seconds: `cfg_branches`, the guidance branches a step
        ran (mean over its steps; 1 without guidance, whatever the CFG-parallel layout), with LoRA
        adapters `lora_switch_s` (activating the request's set; ~0 when it is the previous one's),
        and the step cache's report."""
        if self.job is None:
            return {}
        switch = {"lora_switch_s": self.lora_switch_s} if self.loras.models else {}
        return {"cfg_branches": self.job.branches_per_step, **switch, **self.cache_report()}

    def cache_report(self) -> dict[str, float]:
        """The current job's transformer evaluations computed and skipped ({} when uncached)."""
        return self.job.cache.report() if self.job is not None and self.job.cache is not None else {}

    def time_forward(self, aco: bool) -> float:
        """Seconds for one transformer forward on the current job, without advancing it."""
        job = self.job
        self._set_aco(aco)
        try:
            device_time.wait_for_device(self.device)  # earlier work is not this forward's
            start = time.perf_counter()
            timestep = job.timesteps[job.steps_done]
            job.predict(job.latents, timestep, job.cond, self.adapter.guidance_scale_at(job.request, timestep))
            self._end_aco_forward(aco)
            self.state.deadline.settle()  # as a step does: a timed forward's ops are checked, then forgotten
            device_time.wait_for_device(self.device)
            return time.perf_counter() - start
        finally:
            self._set_aco(False)

    def time_steps(self, request: VideoRequest, cond: dict, chunks: list, rounds: int) -> dict:
        from .step_timer import time_steps

        return time_steps(self, request, cond, chunks, rounds)

    def finish(self, decode_rank: int | None = None, sound_rank: int | None = None) -> VideoResult | torch.Tensor | None:
        """No decode ranks: rank 0 decodes (the frames, then the sound of a model that makes it)
        and returns the VideoResult. With decode ranks, rank 0 hands the latents to `decode_rank`
        (and to `sound_rank`, the decode rank that decodes the sound beside it, if any): returned
        for the Ray object store, or sent point-to-point (p2p handoff; the send is waited on at
        the next handoff)."""
        job, self.job = self.job, None
        if self.rank != 0:
            return None
        latents = job.latents.float()
        if self.layout.decode == 0:
            self.state.faults.enter(phase="decode", prompt=job.request.prompt)
            self.state.faults.check()
            frames = (self._decode_offloaded if self.offload_idle else self.adapter.decode)(job.latents)[0].cpu()
            sound = self.adapter.decode_sound(job.latents, job.request.shape)
            device_time.wait_for_device(self.device)  # the decode phase's end (decode_s)
            return VideoResult(job.request.request_id, frames=frames, latents=latents.cpu(), sound=sound)
        if self.layout.handoff == "p2p":
            self._wait_send()
            receivers = [decode_rank] + ([sound_rank] if sound_rank is not None else [])
            self._pending_send = p2p.post(sends=[(latents.contiguous(), rank) for rank in receivers],
                                          op="latent handoff send", state=self.state)
            return None
        return latents.cpu()

    def _wait_send(self) -> None:
        if self._pending_send is not None:
            pending, self._pending_send = self._pending_send, None
            pending.wait(host=True)  # a decode rank that died before receiving fails this, in time

    def close(self) -> None:
        self._wait_send()
        super().close()
