"""`pipedit bench latency` flags. Omitted grid flags take the config's generation defaults."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .methods import METHODS


def _resolutions(text: str) -> list[tuple[int, int]]:
    found = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        width, sep, height = part.lower().partition("x")
        if not (sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
            raise argparse.ArgumentTypeError(
                f"'{part}' is not WxH: give comma-separated width x height in pixels, e.g. 480x352,1024x576")
        found.append((int(width), int(height)))
    if not found:
        raise argparse.ArgumentTypeError("expected at least one WxH resolution, e.g. 480x352")
    return found


def _positive_ints(name: str):
    def parse(text: str) -> list[int]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{name} must be comma-separated integers >= 1, got '{text}'")
        return [int(p) for p in parts]
    return parse


def add_latency_parser(kinds) -> None:
    p = kinds.add_parser("latency", help="the paper's latency protocol over shapes x methods: JSON, Markdown, PNG")
    p.add_argument("--config", help="YAML engine config: model, device, rank count (parallel.ranks, or "
                                    "ulysses*ring + decode_ranks), PipeSP chunk, decode ranks")
    p.add_argument("--model-path", help="checkpoint folder (default: the config's, else the embedded demo model)")
    p.add_argument("--resolutions", type=_resolutions, help="WxH list, e.g. 480x352,1024x576 (default: the config's)")
    p.add_argument("--frames", type=_positive_ints("--frames"), help="frame counts, e.g. 65,97 (default: the config's)")
    p.add_argument("--steps", type=_positive_ints("--steps"), help="denoising steps, e.g. 10,50 (default: the config's)")
    p.add_argument("--prompts", type=int, default=10, help="consecutive prompts per cell (default 10)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)} (default: all)")
    p.add_argument("--ranks", type=int, help="total ranks for every method (default: the config's)")
    p.add_argument("--base-offload", action="store_true",
                   help="base: keep the idle module (VAE while denoising, DiT while decoding) on the host (GPU only)")
    p.add_argument("--out", help="output folder (default: outputs/bench-latency-<UTC time>)")
    p.set_defaults(run=_run_latency)


def _run_latency(args) -> int:
    from ..config import EngineConfig, load_config
    from ..errors import UserInputError
    from .latency import LatencySettings, bench_latency
    from .methods import parse_methods, total_ranks

    if args.prompts < 1:
        raise UserInputError(f"--prompts must be at least 1, got {args.prompts}")
    if args.ranks is not None and args.ranks < 1:
        raise UserInputError(f"--ranks must be at least 1, got {args.ranks}")
    config = load_config(args.config) if args.config else EngineConfig()
    config = config.with_overrides("model", path=args.model_path)
    g = config.generation
    settings = LatencySettings(
        resolutions=tuple(args.resolutions or [(g.width, g.height)]), frames=tuple(args.frames or [g.num_frames]),
        steps=tuple(args.steps or [g.steps]), prompts=args.prompts, methods=tuple(parse_methods(args.methods)),
        ranks=args.ranks or total_ranks(config.parallel), base_offload=args.base_offload,
    )
    out = Path(args.out or f"outputs/bench-latency-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    report = bench_latency(config, settings, out)
    from .report import markdown

    print(markdown(report), end="")
    print(f"wrote {out / 'latency.json'}, {out / 'latency.md'}, {out / 'latency.png'}")
    return 0
