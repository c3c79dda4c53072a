"""Wan2.2 A14B's two experts on a denoise rank: `transformer` for high noise (t >= boundary),
`transformer_2` for low noise, and the guidance scale of each (guidance_scale, guidance_scale_2),
as diffusers' WanPipeline / WanImageToVideoPipeline choose them per timestep.

Memory (model.idle_expert): `resident` keeps both experts on the device; `offload` keeps the idle
one on the host and swaps them when a step needs the other: once at the boundary of a request,
once back at the next request's first step. On a CPU device offload moves nothing (host is the
device)."""

from __future__ import annotations

import torch

from pipedit.config import IDLE_EXPERT_MODES


class Experts:
    def __init__(self, modules: list, boundary_timestep: float | None, device: torch.device, idle: str = "resident"):
        if idle not in IDLE_EXPERT_MODES:
            raise ValueError(f"idle_expert must be one of {', '.join(IDLE_EXPERT_MODES)}, got {idle!r}")
        self.modules = modules
        self.boundary = boundary_timestep
        self.device = device
        self.offload = idle == "offload" and len(modules) == 2 and device.type != "cpu"
        if self.offload:
            modules[1].to("cpu")  # the low-noise expert waits on the host until the first boundary
        self.uses = [0] * len(modules)  # forwards run per expert (tests check the switch happens)

    def index_for(self, timestep) -> int:
        """0 (transformer) unless two experts and t < boundary (transformer_2)."""
        if self.boundary is None or len(self.modules) == 1:
            return 0
        return 0 if float(timestep) >= self.boundary else 1

    def for_timestep(self, timestep):
        index = self.index_for(timestep)
        module = self.modules[index]
        if self.offload:
            self._make_resident(index)
        self.uses[index] += 1
        return module

    def _make_resident(self, index: int) -> None:
        # Hazard: a module's parameters move in place, so references to the expert stay valid;
        # the idle one leaves first so that both never occupy the device together.
        wanted, idle = self.modules[index], self.modules[1 - index]
        if next(wanted.parameters()).device == self.device:
            return
        idle.to("cpu")
        wanted.to(self.device)

    def guidance_scale(self, timestep, guidance_scale: float, guidance_scale_2: float | None) -> float:
        """This step's scale: guidance_scale_2 (None: guidance_scale) for the low-noise expert. A
        request without guidance (guidance_scale <= 1) stays unguided at every step, as diffusers
        decides guidance from guidance_scale alone."""
        if guidance_scale <= 1 or self.index_for(timestep) == 0 or guidance_scale_2 is None:
            return guidance_scale
        return guidance_scale_2
