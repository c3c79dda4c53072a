"""`pipedit bench kernels`: one block per released model, per attention kernel and precision
(pipedit.bench.kernels); `--write-calibration FILE` for `pipedit plan --calibration FILE`."""

from __future__ import annotations

import argparse


def _shapes(text: str) -> tuple[tuple[int, int, int], ...]:
    found = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        numbers = part.lower().split("x")
        if len(numbers) != 3 or not all(n.isdigit() and int(n) > 0 for n in numbers):
            raise argparse.ArgumentTypeError(f"'{part}' is not WxHxF: give comma-separated width x height x frames, "
                                             f"e.g. 832x480x81,1280x720x81")
        found.append(tuple(int(n) for n in numbers))
    if not found:
        raise argparse.ArgumentTypeError("expected at least one WxHxF shape, e.g. 832x480x81")
    return tuple(found)


def add_kernels(kinds) -> None:
    from ..bench.kernels import DEFAULT_SHAPES

    default = ",".join("x".join(map(str, shape)) for shape in DEFAULT_SHAPES)
    p = kinds.add_parser("kernels", help="one transformer block per released model: ms, TFLOP/s and share of the "
                                         "measured matmul rate per attention kernel and precision, predicted s/step")
    p.add_argument("--models", help="comma-separated full-size models (default: every one, equal blocks once; "
                                    "see `pipedit plan --help`)")
    p.add_argument("--shapes", type=_shapes, default=DEFAULT_SHAPES,
                   help=f"WxHxF video shapes whose token counts the rows use (default {default}: 480p and 720p)")
    p.add_argument("--kernels", help="comma-separated kernels to time, of those available (default: every one that "
                                     "passes its probe here: sdpa, sdpa-flash, sdpa-cudnn, flash, flash3, xformers, sage, ...)")
    p.add_argument("--repeats", type=int, default=3, help="timed forwards per row after a warm-up (mean; default 3)")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (default: the first GPU, else cpu)")
    p.add_argument("--tokens", type=int,
                   help="every row at this many video tokens instead of the shapes' (a scaled run, labelled so)")
    p.add_argument("--width-divisor", type=int, default=1,
                   help="divide each model's heads by this, head width kept (a scaled run, labelled so; default 1)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--write-calibration", metavar="FILE",
                   help="write the fastest kernel's measured rows for `pipedit plan --calibration FILE`")
    p.set_defaults(run=run)


def run(args) -> int:
    import json
    from pathlib import Path

    from ..bench.kernels import KernelBenchSettings, bench_kernels, calibration, check_settings, format_report
    from ..device_time import matmul_dtype
    from ..distributed.devices import resolve_rank_device

    models = tuple(m.strip() for m in (args.models or "").split(",") if m.strip())
    kernels = tuple(k.strip() for k in (args.kernels or "").split(",") if k.strip())
    settings = KernelBenchSettings(models, args.shapes, args.repeats, args.tokens, args.width_divisor, kernels)
    check_settings(settings)
    device = resolve_rank_device(args.device)
    report = bench_kernels(settings, device, matmul_dtype(device))
    if args.write_calibration:
        Path(args.write_calibration).write_text(json.dumps(calibration(report), indent=1) + "\n")
    print(json.dumps(report) if args.json else format_report(report))
    if args.write_calibration and not args.json:
        print(f"wrote {args.write_calibration}")
    return 0
