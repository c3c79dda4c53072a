"""`pipedit dry-run`: every rank of a config at the real model size on fake tensors (pipedit.dryrun):
peak memory per rank against the GPU and the planner, collective sequences per process group."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    from ..families import DEFAULT, family_names
    from ..planner.hardware import PROFILES
    from ..planner.models import model_names
    from .flags import add_shape_flags

    p = sub.add_parser("dry-run", help="run every rank of a config at full model size on fake tensors (no GPU, no "
                                       "weights): memory per rank vs the GPU and the planner, collective matching")
    p.add_argument("--config", required=True, help="engine config YAML (e.g. configs/hunyuan-8gpu.yaml)")
    releases = [name for name in model_names() if name not in family_names()]
    p.add_argument("--model", choices=tuple(dict.fromkeys((*family_names(), *model_names()))),
                   help=f"model family, or a full-size release ({', '.join(releases)}) for its released configs "
                        f"(default: the config's, else {DEFAULT})")
    p.add_argument("--model-path", help="read the model's configs (config.json only, no weights) from this checkpoint "
                                        "folder instead of the released configs")
    add_shape_flags(p, {"steps": 2}, frames_flag="--frames",
                    helps={"height": "video height (default: the config's generation.height)",
                           "width": "video width (default: the config's)",
                           "num_frames": "video frames (default: the config's)",
                           "steps": "denoising steps to run (memory repeats per step)"})
    p.add_argument("--gpu", choices=sorted(PROFILES), default="h100", help="GPU profile: capacity and tiling decisions")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..config import load_config
    from ..dryrun import dry_run
    from ..dryrun.report import table
    from ..dryrun.world import resolve

    world = resolve(load_config(args.config), model=args.model, model_path=args.model_path, height=args.height,
                    width=args.width, frames=args.frames, steps=args.steps, gpu=args.gpu)
    report = dry_run(world)
    print(json.dumps(report) if args.json else table(report))
    return 0 if report["ok"] else 1
