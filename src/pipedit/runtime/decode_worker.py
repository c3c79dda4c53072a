"""A decode worker: one rank of the VAE decode group (DeDiVAE). It decodes one request at a
time, may hold the text encoders, and while it has nothing to decode it can serve attention
heads for the denoise ranks (Aco)."""

from __future__ import annotations

import torch

from ..adapter import attention_heads
from ..attention.aco import AcoShape, plan_aco, serve_aco_calls
from ..attention.kernels import AttentionKernel
from ..distributed import p2p
from ..distributed.deadline import CommunicationError
from ..request import VideoRequest, VideoResult
from ..sound import Soundtrack
from .rank import RankWorker


class DecodeWorker(RankWorker):
    def setup(self, model_path: str, rendezvous: str | None = None) -> None:
        self._join(model_path, rendezvous)
        self.aco_pairs = []
        if self.layout.aco:
            plan = plan_aco(attention_heads(self.model_path, self.config.model.name), self.layout.denoise_ranks, self.layout.decode_ranks)
            self.aco_pairs = plan.served_by(self.rank)
        self.kernel = AttentionKernel()

    def decode(self, request: VideoRequest, latents: torch.Tensor | None, with_sound: bool = True) -> VideoResult:
        """Decodes the latents handed over through the object store, or receives them from
        denoise rank 0 (p2p handoff: `latents` is None); then the sound of a model that makes it,
        unless another decode rank decodes it (`with_sound` False: decode_sound runs there)."""
        self.state.faults.enter(phase="decode", prompt=request.prompt)
        latents = self._handed(request, latents)
        self.state.faults.check()
        on_device = latents.to(self.device)
        frames = self.adapter.decode(on_device)[0].cpu()
        sound = self.adapter.decode_sound(on_device, request.shape) if with_sound else None
        return VideoResult(request.request_id, frames=frames, latents=latents.float().cpu(), sound=sound)

    def decode_sound(self, request: VideoRequest, latents: torch.Tensor | None) -> Soundtrack | None:
        """The sound of the latents a peer decode rank decodes the frames of, at the same time
        (latents as `decode` takes them: rank 0 sends them to both)."""
        self.state.faults.enter(phase="decode", prompt=request.prompt)
        latents = self._handed(request, latents)
        self.state.faults.check()
        return self.adapter.decode_sound(latents.to(self.device), request.shape)

    def decode_free_bytes(self) -> int | None:
        """Free device memory for decodes now (runtime.decode_budget asks once the group is up)."""
        return self.adapter.free_decode_bytes()

    def fix_decode_budget(self, free_bytes: int) -> None:
        self.adapter.fix_decode_budget(free_bytes)

    def reserve_encode(self, request: VideoRequest) -> int:
        """On the text rank among the decode ranks, once a group is up and before its decode budget
        is fixed: the next request's encode runs here while a decode does, so the peak of one
        encode of `request` (the configured shape; a placeholder image for image-to-video),
        measured now, is kept out of the memory decodes are decided on. Returns it (0, and nothing
        run, off CUDA or for a model whose decode does not depend on memory)."""
        if self.device.type != "cuda" or self.adapter.free_decode_bytes() is None:
            return 0
        peak = device_peak_bytes(self.device, lambda: self.encode_prompt(request))  # host tensors back: freed again
        self.adapter.reserve_for_encode(peak)
        return peak

    def split_units(self, request: VideoRequest) -> int:
        """Units a decode of this request would be split into over the decode group now (1: none)."""
        if self.decode_group is None:
            return 1
        return self.adapter.split_units(self.adapter.latent_shape(request.shape), len(self.decode_group.ranks))

    def decode_split(self, request: VideoRequest, latents: torch.Tensor | None) -> VideoResult | Soundtrack | None:
        """One video decoded by every decode rank (each called at once). The lead (first decode
        rank) gets the latents as `decode` does and returns the VideoResult; the last decode rank,
        once its share is sent, decodes the sound (None from a model without it) while the lead
        assembles the frames, and returns it; the others None. Any failure here leaves peers
        inside a collective: the group is rebuilt (rank_failure)."""
        from . import split_decode

        group = self.decode_group
        lead = self.rank == group.lead
        self.state.faults.enter(phase="decode", prompt=request.prompt)
        if lead:
            latents = self._handed(request, latents)
        shape = self.adapter.latent_shape(request.shape)
        mode = self.adapter.decode_mode(shape) if lead else 0
        latents, mode = split_decode.share(latents.to(self.device) if lead else None, mode, shape, self.device, group)
        self.state.faults.check()
        plan = self.adapter.split_plan(latents, mode, len(group.ranks))
        video = split_decode.decode_share(plan, group, self.device)
        if not lead:
            return self.adapter.decode_sound(latents, request.shape) if self.rank == group.ranks[-1] else None
        frames = self.adapter.frames(video)[0].cpu()
        return VideoResult(request.request_id, frames=frames, latents=latents.float().cpu())

    def _handed(self, request: VideoRequest, latents: torch.Tensor | None) -> torch.Tensor:
        """The latents from the object store, or (None) received from denoise rank 0 (p2p handoff)."""
        if latents is not None:
            return latents
        received = torch.empty(self.adapter.latent_shape(request.shape), dtype=torch.float32, device=self.device)
        try:  # the form rank 0 sends in
            p2p.post(recvs=[(received, 0)], op="latent handoff receive", state=self.state).wait(host=True)
        except Exception as error:  # rank 0's send may stay unmatched: not a clean failure
            raise CommunicationError(f"latent handoff receive from rank 0 failed: {error}") from error
        return received

    def aco_serve(self, shape: AcoShape) -> int:
        """Serve the attention calls of one denoising step (or timed forward) for the denoise
        ranks, until they send its end (a step may run several transformer passes)."""
        if self.aco_pairs:
            self.state.faults.enter(phase="aco")
            serve_aco_calls(self.aco_pairs, shape, None, self.kernel, self.device, self.state)
            self.state.deadline.settle()
        return len(self.aco_pairs)


def device_peak_bytes(device: torch.device, run) -> int:
    """The CUDA memory `run()` allocates at its peak above what was allocated before it (on every
    stream: the encode runs on its own); waits for the device before and after."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    run()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device)) - before
