"""Defect 1, as the dry run sees it: an NCCL Work holds its op's buffers until it is released.
Watching the Works until the step's deadline.settle() (the old Pending.wait, restored here by a
monkeypatch) keeps every all-to-all buffer of the forward alive, so the peak's communication
memory grows with the attention calls per forward; watching a completion marker (the fix in
pipedit.distributed.collectives) leaves it flat."""

import json
import shutil

import pytest

from pipedit.config import load_config
from pipedit.distributed import collectives, deadline


def _config_only(source, target, layers: int):
    """The demo's configs without weights (all the dry run reads), with `layers` + `layers` blocks."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors"))
    file = target / "transformer" / "config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), "num_layers": layers, "num_single_layers": layers}))
    return str(target)


@pytest.fixture
def watch_works_until_settle(monkeypatch):
    """The behaviour before the fix (rank 0 holds no VAE here: its peak is in the forward): device-side waits keep their Works until settle()."""
    held = []
    wait, settle = collectives.Pending.wait, deadline.OpDeadline.settle

    def old_wait(self, host=False, *args, **kwargs):
        if not self._waited and not host:
            held.extend(w for w in self._works if not isinstance(w, collectives.Pending))
        return wait(self, host, *args, **kwargs)

    def old_settle(self):
        held.clear()
        settle(self)

    monkeypatch.setattr(collectives.Pending, "wait", old_wait)
    monkeypatch.setattr(deadline.OpDeadline, "settle", old_settle)


def _comm_at_peak(tmp_path, demo_checkpoint, layers: int) -> tuple[int, int]:
    from pipedit.dryrun import dry_run
    from pipedit.dryrun.world import resolve

    file = tmp_path / "u2.yaml"
    file.write_text("model:\n  dtype: bfloat16\nparallel:\n  ulysses: 2\n  decode_ranks: 1\n  aco: 'off'\n"
                    "generation:\n  height: 256\n  width: 256\n  num_frames: 17\n")
    path = _config_only(demo_checkpoint, tmp_path / f"layers{layers}", layers)
    world = resolve(load_config(file), model=None, model_path=path, height=None, width=None, frames=None,
                    steps=1, gpu="h100")
    rank0 = dry_run(world)["ranks"][0]
    return rank0["by_kind"]["comm"], rank0["peak_bytes"]


def test_watched_works_keep_every_buffer_of_the_forward(tmp_path, demo_checkpoint, watch_works_until_settle):
    few, _ = _comm_at_peak(tmp_path, demo_checkpoint, 2)
    many, _ = _comm_at_peak(tmp_path, demo_checkpoint, 6)
    assert many > 2.5 * few > 0  # 4 vs 12 attention calls' buffers held at the peak


def test_with_the_fix_communication_memory_is_flat(tmp_path, demo_checkpoint):
    few, few_peak = _comm_at_peak(tmp_path, demo_checkpoint, 2)
    many, many_peak = _comm_at_peak(tmp_path, demo_checkpoint, 6)
    assert many == few
    assert many_peak - few_peak < 0.05 * few_peak + 4 * 1024 ** 2  # weights of 8 more blocks only


def test_remembered_values_leave_torch_device_factories_intact():
    """torch.device(...) as a context knows its factory functions from a set built once per
    process; built while the dry run's torch.tensor wrapper stood in, it lost the real torch.tensor
    for good (transformers' from_pretrained then left CLIP's position_ids uninitialised)."""
    import torch
    from torch.utils._device import _device_constructors

    from pipedit.dryrun.fakeworld import remembered_values

    _device_constructors.cache_clear()
    try:
        with remembered_values():
            _device_constructors()  # the first build happens inside the window
        assert torch.tensor in _device_constructors()
    finally:
        _device_constructors.cache_clear()
