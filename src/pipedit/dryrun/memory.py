"""Peak memory of one rank under fake tensors: live storages counted by a TorchDispatchMode.

Why our own counter (not torch.distributed._tools.mem_tracker.MemTracker): MemTracker sorts
memory by module and training kinds (params, grads, optimizer state); the dry run needs
serving kinds, one counter per rank, and tags that only the rank code knows (a tensor handed
to a collective is a communication buffer). The counter sees every op's outputs; each new
storage is counted once (views share it) at storage.nbytes() and uncounted when the storage
dies (weakref.finalize: torch preserves the Python storage object while a tensor uses it).

Kinds, resolved when the report is made (a tag may come after the allocation):
  weights   parameters and buffers of the rank's model components
  comm      buffers handed to a collective or P2P op (send and receive)
  state     still alive when a rank call returned: latents, condition, caches across calls
  activations  everything else (live only inside a call)

Hazard: storages that grow in place (resize_) are counted at their first size; the rank code
does not resize.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

KINDS = ("weights", "activations", "comm", "state")


@dataclass
class _Entry:
    nbytes: int
    kind: str = "activations"


class StorageCounter(TorchDispatchMode):
    """Counts live storages created while it is active (enter it inside the FakeTensorMode)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, _Entry] = {}
        self.current = 0
        self.peak = 0
        self._at_peak: tuple[_Entry, ...] = ()
        self._ignored: set[int] = set()  # storages off the device (forget)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and value.device.type != "meta":  # meta: shapes only
                self._track(value)
        return out

    def _track(self, tensor: torch.Tensor) -> _Entry:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._ignored:  # views of it (a weight's transpose) stay uncounted too
            return _Entry(0)
        entry = self._live.get(key)
        if entry is None:
            entry = self._live[key] = _Entry(storage.nbytes())
            weakref.finalize(storage, self._free, key)
            self.current += entry.nbytes
            if self.current > self.peak:
                self.peak = self.current
                self._at_peak = tuple(self._live.values())
        return entry

    def _free(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self.current -= entry.nbytes

    def tag(self, tensors, kind: str) -> None:
        """Marks these tensors' storages as `kind` (weights win over any later tag)."""
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                entry = self._track(tensor)
                if entry.kind != "weights":
                    entry.kind = kind

    def forget(self, tensors) -> None:
        """These tensors' storages stop counting, views of them too (they stand for memory off the
        device, alive while the tensors are); the peak restarts from what is left (call it before
        the rank computes anything)."""
        for tensor in tensors:
            self._ignored.add(tensor.untyped_storage()._cdata)
            entry = self._live.pop(tensor.untyped_storage()._cdata, None)
            if entry is not None:
                self.current -= entry.nbytes
        self.peak, self._at_peak = self.current, tuple(self._live.values())

    def tag_live_as_state(self) -> None:
        """After a rank call returns: what is still alive (and untagged) is state across calls."""
        for entry in self._live.values():
            if entry.kind == "activations":
                entry.kind = "state"

    def live_bytes(self) -> int:
        return self.current

    def peak_by_kind(self) -> dict[str, int]:
        """Bytes of each kind at the moment of the total peak (they sum to the peak)."""
        found = dict.fromkeys(KINDS, 0)
        for entry in self._at_peak:
            found[entry.kind] += entry.nbytes
        return found
