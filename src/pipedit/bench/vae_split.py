"""`pipedit bench vae --ranks N`: one video's decode split over N ranks (pipedit.runtime.split_decode)
against the same decode on one rank: seconds and peak memory per rank, and the largest difference
between the two videos' frames.

Both sides run as spawned gloo ranks with one torch thread each (a rank stands for one GPU: N
ranks use N cores, the one-rank decode one), on seeded random latents, in the VAE tiling mode
asked (HunyuanVideo: off keeps diffusers' untiled decode, whose units are its temporal passes; on
adds spatial tiles; OpenSoraPlan: on is the causal temporal tiling, the units are row bands either
way). Seconds: the split as the lead sees it, the mode and latents' broadcast and the gather
included. Peak: as `pipedit bench vae` measures it (the process's peak resident memory above the
memory before the decode on CPU; torch.cuda.max_memory_allocated on CUDA).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..adapter import VideoShape, load_adapter
from .vae import MIB, _PeakMeter

@dataclass(frozen=True)
class RankRun:
    seconds: float
    peak_bytes: int | None
    units: int  # units this rank decoded (one rank: the video's units, decoded one after another)
    frames: torch.Tensor | None  # the lead's (rank 0's) decoded frames


def _adapter_and_latents(path: str, model: str | None, shape: VideoShape, mode: str, seed: int):
    adapter = load_adapter(path, parts={"vae"}, device="cpu", vae_tiling=mode, model=model)
    adapter.validate(shape, 1)
    return adapter, adapter.prepare_latents(shape, torch.Generator("cpu").manual_seed(seed))


def _rank(rank: int, world_size: int, path: str, model: str | None, shape: VideoShape, mode: str,
          seed: int) -> RankRun:
    """One rank of the bench (spawned by run_on_gloo_ranks); one rank alone: the plain decode."""
    from ..distributed.rank_state import RankState
    from ..runtime import split_decode

    adapter, latents = _adapter_and_latents(path, model, shape, mode, seed)
    # every rank, before timing; no operation deadline, as in every bench
    group = split_decode.make_decode_group(tuple(range(world_size)), True, RankState.for_rank(rank))
    units = adapter.split_units(latents.shape, world_size)
    with _PeakMeter(adapter.device) as meter:
        start = time.perf_counter()
        if group is None:
            frames = adapter.decode(latents)
        else:
            lead = rank == group.lead
            mode_id = adapter.decode_mode(latents.shape) if lead else 0
            latents, mode_id = split_decode.share(latents if lead else None, mode_id, latents.shape, adapter.device,
                                                  group)
            plan = adapter.split_plan(latents, mode_id, world_size)
            units = split_decode.assign(plan.costs, world_size).count(rank)
            video = split_decode.decode_share(plan, group, adapter.device)
            frames = adapter.frames(video) if lead else None
        seconds = time.perf_counter() - start
    return RankRun(seconds, meter.peak, units, None if frames is None else frames[0])


def demo_paths(path: str | None) -> dict[str, str]:
    """The checkpoint asked for, else the demo models of the families benched with split decodes
    (pipedit.families.benched("vae-ranks"); written once, offline)."""
    from .. import families
    from ..adapter import model_name_for

    if path:
        return {model_name_for(path): path}
    return {name: str(families.demo_model(name)) for name in families.benched("vae-ranks")}


def measure(path: str, model: str | None, shape: VideoShape, mode: str, ranks: int, seed: int = 0):
    """(the one-rank run, the split's runs per rank)."""
    from ..distributed.spawn import run_on_gloo_ranks

    alone = run_on_gloo_ranks(_rank, 1, path, model, shape, mode, seed, timeout_s=1800)[0]
    split = run_on_gloo_ranks(_rank, ranks, path, model, shape, mode, seed, timeout_s=1800)
    return alone, split


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:.1f}"


def rows(family: str, mode: str, alone: RankRun, split: list[RankRun]) -> list[str]:
    diff = (split[0].frames - alone.frames).abs().max().item()
    lines = [f"{family:<14}{mode:<6}{'1':>6}{alone.units:>7}{alone.seconds:>10.2f}{_mib(alone.peak_bytes):>11}"
             f"{'':>10}{'-':>12}"]
    for rank, run in enumerate(split):
        lead = "lead" if rank == 0 else ""
        lines.append(f"{'':<20}{f'{rank}/{len(split)}':>6}{run.units:>7}{run.seconds:>10.2f}{_mib(run.peak_bytes):>11}"
                     f"{lead:>10}{(f'{diff:.3g}' if rank == 0 else ''):>12}")
    return lines


def bench_vae_ranks(paths: dict[str, str], shape: VideoShape, modes: tuple[str, ...], ranks: int, seed: int = 0) -> str:
    """paths: model name -> checkpoint folder."""
    lines = [f"VAE decode of {shape.height}x{shape.width}x{shape.num_frames} random latents on CPU: one rank vs "
             f"{ranks} ranks (one torch thread per rank)",
             "peak: peak resident memory above the memory in use before the decode, per rank process",
             f"{'model':<14}{'mode':<6}{'rank':>6}{'units':>7}{'seconds':>10}{'peak MiB':>11}{'':>10}"
             f"{'max |diff|':>12}"]
    for model, path in paths.items():
        for mode in modes:
            alone, split = measure(path, model, shape, mode, ranks, seed)
            lines += rows(model, mode, alone, split)
    lines.append("units: HunyuanVideo's temporal passes x tiles, OpenSoraPlan's row bands (one rank: the video's); "
                 "rank 0 leads and holds the video; max |diff|: frames in [0, 1], split vs one rank")
    return "\n".join(lines)
