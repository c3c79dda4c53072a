"""The dry run's world: fake tensors, one fake process group per rank, NCCL's device path.

- Fake tensors: one FakeTensorMode for the whole run (real shapes, dtypes and storage sizes, no
  memory, no compute). Everything stays on fake *CPU* tensors: fake CUDA modules do not build on
  the CPU torch build (see DESIGN.md), and memory does not depend on the device.
  allow_non_fake_inputs: schedulers build small real tensors (torch.from_numpy); ops on them
  return fake tensors.
- Process groups: `rank_group(r, n)` initialises torch's "fake" backend as rank r of n (group
  creation and argument checks work, no data moves) and destroys it afterwards; ranks run one
  after another in this process.
- The device path: pipedit's collectives do what NCCL needs (work.wait() orders the stream, a
  completion marker is watched for the deadline) when `collectives.device_side(tensors)` says
  the buffers are CUDA tensors. Fake CPU tensors are not, so `device_path()` makes it answer
  True and replaces `collectives.completion_marker` (a CUDA event) with a completed marker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

from ..distributed import collectives


@contextlib.contextmanager
def fake_tensors() -> Iterator[FakeTensorMode]:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        yield mode


@contextlib.contextmanager
def rank_group(rank: int, world_size: int) -> Iterator[None]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process: run the dry run in its own "
                           "process (pipedit dry-run), not inside a distributed job")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class _DoneMarker:
    """Stands in for the CUDA event Pending.wait records for the deadline watch."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


@contextlib.contextmanager
def device_path() -> Iterator[None]:
    """Pending.wait takes NCCL's device path (collectives.device_side) for every op with buffers."""
    side, marker = collectives.device_side, collectives.completion_marker
    collectives.device_side = lambda tensors: len(tensors) > 0
    collectives.completion_marker = _DoneMarker
    try:
        yield
    finally:
        collectives.device_side, collectives.completion_marker = side, marker


_SMALL = 16  # elements: headers and other small host-made messages


@contextlib.contextmanager
def remembered_values() -> Iterator[None]:
    """Small integer tensors made from Python data (`torch.tensor([...])`, e.g. Aco's headers)
    remember their values as `_dry_values`: the recorder carries them to the receiving rank,
    whose rank code reads them (`header.tolist()`); fake tensors have no values otherwise."""
    # Hazard: torch.device(...) as a context manager decides which calls are factories from a set
    # built once per process (torch.utils._device._device_constructors, lru_cached). Built while the
    # wrapper below stands in for torch.tensor, it would miss the real one for the rest of the
    # process: a later model build under torch.device("meta") (transformers' from_pretrained) then
    # leaves buffers made with torch.tensor uninitialised. Build it first, from the real functions.
    from torch.utils._device import _device_constructors

    _device_constructors()
    original = torch.tensor

    def tensor(data, *args, **kwargs):
        made = original(data, *args, **kwargs)
        if isinstance(data, (list, tuple)) and not made.is_floating_point() and made.numel() <= _SMALL:
            made._dry_values = [int(v) for v in data]
        return made

    torch.tensor = tensor
    try:
        yield
    finally:
        torch.tensor = original


def materialize(module: torch.nn.Module, dtype: torch.dtype | None) -> torch.nn.Module:
    """Gives a module built on the meta device a fresh fake tensor per parameter and buffer
    (call inside the FakeTensorMode). `module.to(dtype)` inside the mode fails swapping
    parameters; this is the seam. Floating tensors take `dtype` (None: keep theirs). A tensor tied
    to several modules (T5 encoders' shared embedding) stays one tensor."""
    made: dict[int, torch.Tensor] = {}
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None:
                if id(param) not in made:
                    made[id(param)] = torch.nn.Parameter(_empty_like(param, dtype), requires_grad=False)
                sub._parameters[name] = made[id(param)]
        for name, buffer in list(sub._buffers.items()):
            if buffer is not None:
                if id(buffer) not in made:
                    made[id(buffer)] = _empty_like(buffer, dtype)
                sub._buffers[name] = made[id(buffer)]
    return module.eval()


def _empty_like(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    target = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
    return torch.empty(tensor.shape, dtype=target, device="cpu")
