"""Wan2.2 A14B's two experts on a denoise rank: `transformer` for high noise (t >= boundary),
`transformer_2` for low noise, and the guidance scale of each (guidance_scale, guidance_scale_2),
as diffusers' WanPipeline / WanImageToVideoPipeline choose them per timestep.

Memory (model.idle_expert): `resident` keeps both experts on the device; `offload` keeps the idle
one on the host and swaps them when a step needs the other: once at the boundary of a request,
once back at the next request's first step. On a CPU device offload moves nothing (host is the
device).

Offload's host copy of an expert is its checkpoint files, memory-mapped (pipedit.mapped_weights),
where the files can stand in for the module's weights: offloading points the parameters back at
those views (nothing is copied out, no host memory is allocated), bringing an expert back copies
them to the device in its compute dtype. Every rank maps the same files, so a node holds one host
copy of each expert in the page cache, whatever its rank count. Without usable files the module
moves with `module.to` (a host copy per rank, made at every swap).

Files in another dtype than the module's (float32 files under bf16 modules) are mapped and copied
as they are, cast on the device: each swap moves the files' bytes (twice the module's for
float32) and the page cache holds them. They are not converted to the compute dtype once at
load: a converted host copy is anonymous memory of each rank process (8 denoise ranks x 26.6 GiB
for a 14B expert), where the mapping is one page-cache copy per node; converting once would mean
writing a converted checkpoint (a folder of its own) and serving that. Host memory and swap
volumes are therefore counted in file bytes (`file_bytes`, the dry run and the planner).

The first swap brings the idle expert in from its files, which nobody has read yet: from the disk,
or the shared network folder a cluster may serve models from. Loading asks the kernel to read
those files ahead (pipedit.mapped_weights.read_ahead; its hazard is page cache pressure), and
the driver gives the first request's steps a deadline widened by the files' bytes over a stated
read rate (pipedit.runtime.deadlines.first_swap_seconds)."""

from __future__ import annotations

from pathlib import Path

import torch

from pipedit.components import read_component_config
from pipedit.config import IDLE_EXPERT_MODES
from pipedit.guidance import guidance_applies
from pipedit.components import load_component
from pipedit.mapped_weights import mapped, read_ahead


class Experts:
    def __init__(self, modules: list, boundary_timestep: float | None, device: torch.device, idle: str = "resident",
                 homes: list | None = None):
        """`homes`: per expert, its checkpoint's mapped weights (pipedit.mapped_weights.mapped) or
        None; read with offload only."""
        if idle not in IDLE_EXPERT_MODES:
            raise ValueError(f"idle_expert must be one of {', '.join(IDLE_EXPERT_MODES)}, got {idle!r}")
        self.modules = modules
        self.boundary = boundary_timestep
        self.device = device
        self.offload = idle == "offload" and len(modules) == 2 and device.type != "cpu"
        self.homes = list(homes) if homes is not None else [None] * len(modules)
        # Per expert, the bytes its host copy holds and a swap copies in: the files' (their dtype).
        self.file_bytes = [sum(view.nbytes for view in home.values()) if home else 0 for home in self.homes]
        # The dtype each tensor computes in (a mapped file may store another, e.g. float32).
        self.dtypes = [{name: t.dtype for name, t in _tensors(m)} for m in modules]
        # The dtype the experts compute (and attend) in, read before any swap: afterwards the idle
        # expert's `.dtype` reports its files' (float32 files under bf16 modules).
        self.compute_dtype = _module_dtype(modules[0])
        if self.offload:
            self._send_home(1)  # the low-noise expert waits on the host until the first boundary
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
        # Hazard: a module's parameters change their data in place, so references to the expert
        # stay valid; the idle one leaves first so that both never occupy the device together.
        if next(self.modules[index].parameters()).device == self.device:
            return
        self._send_home(1 - index)
        self._bring(index)

    def _send_home(self, index: int) -> None:
        module, home = self.modules[index], self.homes[index]
        if home is None:
            module.to("cpu")
            return
        for name, tensor in _tensors(module):
            # No copy: the mapped view is the host copy. Non-persistent buffers (not in the
            # files, e.g. rotary tables) are small and stay on the device.
            if name in home:
                _rebind(tensor, home[name])

    def _bring(self, index: int) -> None:
        module, home, dtypes = self.modules[index], self.homes[index], self.dtypes[index]
        if home is None:
            module.to(self.device)
            return
        for name, tensor in _tensors(module):
            if name in home:  # from pageable pages the copy is synchronous for the host; the cast runs on the device
                _rebind(tensor, tensor.data.to(self.device, non_blocking=True).to(dtypes[name]))
            elif tensor.device != self.device:  # a small buffer outside the files (loaded on the host)
                _rebind(tensor, tensor.data.to(self.device))

    def guidance_scale(self, timestep, guidance_scale: float, guidance_scale_2: float | None) -> float:
        """This step's scale: guidance_scale_2 (None: guidance_scale) for the low-noise expert. A
        request without guidance (guidance_scale <= 1) stays unguided at every step, as diffusers
        decides guidance from guidance_scale alone."""
        if not guidance_applies(guidance_scale) or self.index_for(timestep) == 0 or guidance_scale_2 is None:
            return guidance_scale
        return guidance_scale_2


def offload_homes(path, index: dict, components: dict, dtype) -> list:
    """Offload's host copies, on a GPU rank that loaded `transformer`: the checkpoint files,
    mapped (one page-cache copy per node). The idle expert (`transformer_2`, put in `components`)
    is built straight onto its mapping; where it cannot be, it is loaded to the host (a copy per
    rank) and mapped afterwards if its files allow. Its files are read ahead now (the first swap
    reads them; the high-noise expert's were just read by the load). Returns Experts' `homes`."""
    folder = Path(path) / "transformer_2"
    idle = mapped_idle_expert(folder, components["transformer"])
    if idle is None:
        module = load_component(path, index, "transformer_2", dtype=dtype, device="cpu")
        idle = module, mapped(folder, module)
    components["transformer_2"] = idle[0]
    if idle[1] is not None:
        read_ahead(folder)
    return [mapped(Path(path) / "transformer", components["transformer"]), idle[1]]


def mapped_idle_expert(folder: Path, sibling: torch.nn.Module) -> tuple[torch.nn.Module, dict] | None:
    """Offload's idle expert built without reading its weights into memory: the module from its
    config with parameters on the meta device (accelerate's init_empty_weights; buffers that the
    files do not hold, the rotary tables, are computed on the host), each tensor given the dtype
    diffusers gave the same tensor of `sibling` (the other expert, loaded with the same class and
    dtype: A14B's experts share one architecture), and the mapped views of its files that
    Experts then points it at. Loading it to the host first would hold a whole copy per rank until
    the mapping replaced it (8 denoise ranks x 26.6 GiB at once). None where the two experts
    differ or the files cannot stand in: the caller loads it as usual."""
    from accelerate import init_empty_weights

    config = {k: v for k, v in read_component_config(folder.parent, folder.name).items() if not k.startswith("_")}
    if config != {k: v for k, v in sibling.config.items() if not k.startswith("_")}:
        return None
    with init_empty_weights(include_buffers=False):
        module = type(sibling).from_config(config)
    dtypes = {name: tensor.dtype for name, tensor in _tensors(sibling)}
    if dtypes.keys() != {name for name, _ in _tensors(module)}:
        return None
    for name, tensor in _tensors(module):
        if tensor.is_meta:
            _rebind(tensor, torch.empty(tensor.shape, dtype=dtypes[name], device="meta"))
        elif tensor.dtype != dtypes[name]:
            _rebind(tensor, tensor.to(dtypes[name]))
    home = mapped(folder, module)
    if home is None or any(tensor.is_meta and name not in home for name, tensor in _tensors(module)):
        return None
    return module.requires_grad_(False).eval(), home


def swap_after_compile_problem() -> str | None:
    """Why this torch cannot swap the parameters of a module torch.compile has run (offload's
    `_rebind`), or None when it can. Some torch versions' dynamo guards hold weak references to
    the parameters they traced, and torch.utils.swap_tensors refuses a tensor with one: every
    swap of a compiled expert (each A14B request's boundary) would fail. Probed on a small module
    with dynamo's own guards (the eager backend: no kernels are built)."""
    module = _SwapProbe()
    compiled = torch.compile(module.forward, backend="eager", dynamic=None)
    with torch.no_grad():
        compiled(torch.ones(2, 4))
    try:
        _rebind(module.weight, module.weight.data.to(torch.float64))  # as to the files' dtype and back
        _rebind(module.weight, module.weight.data.to(torch.float32))
    except RuntimeError as error:
        return f"torch {torch.__version__} refuses to swap a compiled module's parameters ({error})"
    return None


class _SwapProbe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 4), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def _rebind(tensor: torch.Tensor, data: torch.Tensor) -> None:
    """`tensor` (a parameter or buffer, the same Python object afterwards) now holds `data`, whose
    dtype may differ (a mapped file may store another than the module computes in, which `.data =`
    refuses): torch.utils.swap_tensors keeps the object and exchanges everything else."""
    if isinstance(tensor, torch.nn.Parameter):
        data = torch.nn.Parameter(data, requires_grad=False)
    torch.utils.swap_tensors(tensor, data)


def _module_dtype(module) -> torch.dtype:
    """The module's compute dtype: diffusers' `dtype` (the first floating parameter outside the
    modules it keeps in float32), else the first floating parameter's."""
    dtype = getattr(module, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    return next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)


def _tensors(module) -> list:
    """(name, tensor) of every parameter and buffer, named as in the module's state dict."""
    return [*module.named_parameters(), *module.named_buffers()]
