"""The dry run's verdict: per rank its peak by kind beside the planner's prediction and the
GPU's capacity; per process group whether the members' collective sequences agree.

Fitting: the dry run counts allocated bytes; a GPU also holds the caching allocator's slack and
the CUDA context, so a rank fits when peak x ALLOCATOR_OVERHEAD + CONTEXT_BYTES (the planner's
own allowances, pipedit.planner.memory) is within the capacity. The planner column is the
planner's per-rank prediction for the same layout (denoise_rank_bytes / decode_rank_bytes, as
planner.search.peak_bytes combines them), with the dry run's tiling decision.
"""

from __future__ import annotations

from dataclasses import asdict

from ..planner.cost import Shape
from ..planner.memory import ALLOCATOR_OVERHEAD, CONTEXT_BYTES, decode_rank_bytes, denoise_rank_bytes
from .memory import KINDS
from .ranks import RankResult
from .world import DryWorld

GIB = 1024 ** 3


def on_gpu(peak: int) -> float:
    """What a peak of allocated bytes needs on a GPU (allocator slack, CUDA context)."""
    return peak * ALLOCATOR_OVERHEAD + CONTEXT_BYTES


def planner_bytes(world: DryWorld, result: RankResult, tiled: bool) -> float:
    layout, spec = world.layout, world.spec
    shape = Shape(world.request.height, world.request.width, world.request.num_frames)
    text = result.rank == layout.text_rank
    if result.role == "decode":
        return decode_rank_bytes(spec, shape, text, tiled, layout.aco)
    with_vae = layout.decode == 0 and result.rank == 0
    return denoise_rank_bytes(spec, shape, layout.ulysses, layout.ring, text, with_vae, tiled,
                              getattr(world.config.model, "idle_expert", "resident"))


def verdict(world: DryWorld, results: list[RankResult], mismatches: list[str], groups: list[dict]) -> dict:
    tiled = any(r.tiled for r in results)  # ranks that did not decode: the decoders' decision
    ranks = []
    for result in results:
        need = on_gpu(result.peak_bytes)
        planned = planner_bytes(world, result, tiled if result.tiled is None else result.tiled)
        ranks.append({**asdict(result), "on_gpu_bytes": int(need), "planner_bytes": int(planned),
                      "planner_error": (planned - need) / need, "fits": need <= world.capacity})
    layout = world.layout
    return {
        "model": world.model, "released_configs": world.released, "gpu": world.gpu, "capacity_bytes": world.capacity,
        "shape": {"height": world.request.height, "width": world.request.width, "frames": world.request.num_frames,
                  "steps": world.request.steps},
        "layout": {"ulysses": layout.ulysses, "ring": layout.ring, "cfg": layout.cfg, "decode": layout.decode,
                   "aco": layout.aco, "text_rank": layout.text_rank, "world_size": layout.world_size,
                   "pipesp_chunk": world.config.parallel.pipesp_chunk},
        "ranks": ranks, "collectives": groups, "mismatches": mismatches, "compile_ran_eager": world.compile_ran_eager,
        "ok": all(r["fits"] for r in ranks) and not mismatches,
    }


def _role(rank: dict) -> str:
    role = rank["role"]
    if rank["cfg_group"] is not None:
        role += f" cfg{rank['cfg_group']}"
    if rank["helper"]:
        role += "+aco"
    return role


def table(report: dict) -> str:
    shape, layout = report["shape"], report["layout"]
    lines = [f"{report['model']} ({'released configs' if report['released_configs'] else 'checkpoint configs'}), "
             f"{shape['width']}x{shape['height']}x{shape['frames']}, {shape['steps']} steps; "
             f"u{layout['ulysses']} x r{layout['ring']}{' x cfg2' if layout['cfg'] > 1 else ''}, "
             f"{layout['decode']} decode rank(s), aco {'on' if layout['aco'] else 'off'}, "
             f"pipesp {layout['pipesp_chunk']}; {report['gpu']} ({report['capacity_bytes'] / GIB:.1f} GiB)",
             "memory in GiB; 'on GPU' = peak x 1.1 + 0.6 GB (allocator slack, CUDA context), as the planner counts",
             f"{'rank':>4} {'role':<14} {'holds':<14} " + " ".join(f"{k:>11}" for k in KINDS)
             + f" {'peak':>7} {'on GPU':>7} {'planner':>7} {'error':>6} {'tiled':>5} fits"]
    for r in report["ranks"]:
        kinds = " ".join(f"{r['by_kind'][k] / GIB:>11.2f}" for k in KINDS)
        tiled = "-" if r["tiled"] is None else ("yes" if r["tiled"] else "no")
        lines.append(f"{r['rank']:>4} {_role(r):<14} {','.join(r['holds']):<14} {kinds} {r['peak_bytes'] / GIB:>7.2f} "
                     f"{r['on_gpu_bytes'] / GIB:>7.2f} {r['planner_bytes'] / GIB:>7.2f} {r['planner_error']:>+6.0%} "
                     f"{tiled:>5} {'yes' if r['fits'] else 'NO'}")
    hosted = [r for r in report["ranks"] if r["host_bytes"]]
    if hosted:
        lines.append("weights kept in host memory (GiB; memory-mapped checkpoint files: one page-cache copy per "
                     "node whatever the number of ranks): " + ", ".join(
                         f"rank {r['rank']} {r['host_bytes'] / GIB:.2f}" for r in hosted))
    if report["compile_ran_eager"]:
        lines.append("model.compile: the blocks ran eagerly (compiled blocks issue the same collectives on the "
                     "same shapes; inductor's own buffers are not counted)")
    split = [r for r in report["ranks"] if r.get("split_peak_bytes") is not None]
    if split:
        lines.append("one video split over the decode group, peak per rank (GiB): " + ", ".join(
            f"rank {r['rank']} {r['split_peak_bytes'] / GIB:.2f}" for r in split))
    for group in report["collectives"]:
        if "calls" in group:
            counts = sorted({len(calls) for calls in group["calls"].values()})
            ops = sorted({c.split("(")[0] for calls in group["calls"].values() for c in calls})
            lines.append(f"group {group['members']}: {'/'.join(map(str, counts))} call(s) per member ({', '.join(ops)})")
        else:
            lines.append(f"p2p {group['members'][0]} -> {group['members'][1]}: {len(group['p2p_sends'])} send(s), "
                         f"{len(group['p2p_receives'])} receive(s)")
    lines.append("collectives: " + ("every group's members issue the same sequence; every send meets its receive"
                                    if not report["mismatches"] else f"{len(report['mismatches'])} mismatch(es):"))
    lines += [f"  {m}" for m in report["mismatches"]]
    return "\n".join(lines)
