"""`pipedit dry-run`: every rank of a config at the real model size, on fake tensors, on CPU.

The engine's own rank code (DenoiseWorker, DecodeWorker, the attention strategies, the
adapters) runs one rank after another in this process under torch's FakeTensorMode and a
"fake" process group per rank: real shapes, dtypes and storage sizes, no memory, no compute.
It reports each rank's peak memory by kind beside the planner's prediction and the GPU's
capacity, and checks that every process group's members issue the same collectives in the same
order (and every send meets its receive): what would hang NCCL.

Modules: fakeworld (fake tensors, process group, NCCL's device path), memory (the live-storage
counter), recorder (collective log, Works that hold their buffers), models and released
(components from configs), ranks (the rank runner), world (config resolution), report.
"""

from __future__ import annotations


def dry_run(world) -> dict:
    """Runs every rank of a resolved DryWorld (see world.resolve); returns the report dict."""
    from .ranks import WorldRun
    from .recorder import group_summary
    from .report import verdict

    run = WorldRun(world.config, world.layout, world.model_path, world.request, world.capacity)
    results = run.run()
    return verdict(world, results, run.recorder.mismatches(), group_summary(run.recorder))
