"""`pipedit bench ...` sub-commands."""

from __future__ import annotations

import argparse


def _chunks(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"chunk sizes must be integers >= 1, got '{text}'")
    return values


def _add_sp(kinds) -> None:
    p = kinds.add_parser("sp", help="per-step latency: synchronous Ulysses vs PipeSP chunk sizes and auto")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model of --model)")
    p.add_argument("--model", choices=("hunyuan-video", "opensora-plan"),
                   help="model family (default: found from --model-path; without a path, hunyuan-video)")
    p.add_argument("--config", help="YAML engine config; flags override it")
    p.add_argument("--single-device", action="store_true",
                   help="also time one step on a single device (in this process), the baseline row")
    p.add_argument("--ulysses", type=int, default=2)
    p.add_argument("--ring", type=int, default=1)
    p.add_argument("--height", type=int, default=256)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--num-frames", type=int, default=33)
    p.add_argument("--chunks", type=_chunks, help="PipeSP chunk sizes, e.g. 1,2 (default: all auto considers)")
    p.add_argument("--repeats", type=int, default=10, help="timed rounds, modes interleaved (median reported)")
    p.add_argument("--attention-only", action="store_true",
                   help="time one attention call at a given head layout on local gloo ranks instead of model steps")
    p.add_argument("--heads", type=int, default=24, help="--attention-only: heads (HunyuanVideo: 24)")
    p.add_argument("--head-dim", type=int, default=128, help="--attention-only: head dim (HunyuanVideo: 128)")
    p.add_argument("--seq-len", type=int, default=4096, help="--attention-only: video tokens over all ranks")
    p.add_argument("--text-len", type=int, default=256, help="--attention-only: text tokens")
    p.set_defaults(run=_run_sp)


def _run_sp(args) -> int:
    from .sp import bench_sp
    from ..config import EngineConfig, load_config
    from ..errors import UserInputError
    from ..request import VideoRequest

    if args.repeats < 1:
        raise UserInputError(f"--repeats must be at least 1, got {args.repeats}")
    if args.attention_only:
        return _run_sp_attention(args)
    config = load_config(args.config) if args.config else EngineConfig()
    config = config.with_overrides("model", path=args.model_path, name=args.model)
    config = config.with_overrides("parallel", ulysses=args.ulysses, ring=args.ring)
    request = VideoRequest("a benchmark prompt: a red fox running through snow", height=args.height,
                           width=args.width, num_frames=args.num_frames, steps=1)
    print(bench_sp(config, request, args.chunks, args.repeats, single_device=args.single_device))
    return 0


def _run_sp_attention(args) -> int:
    from ..attention.autotune import AttentionShape
    from .sp import bench_sp_attention
    from ..errors import UserInputError

    if args.ulysses < 2 or args.ulysses > args.heads:
        raise UserInputError(f"--ulysses must be between 2 and --heads ({args.heads}), got {args.ulysses}")
    if min(args.seq_len, args.head_dim) < 1 or args.text_len < 0:
        raise UserInputError("--seq-len and --head-dim must be >= 1 and --text-len >= 0")
    shape = AttentionShape(seq_len=args.seq_len, text_len=args.text_len, heads=args.heads, head_dim=args.head_dim)
    print(bench_sp_attention(args.ulysses, shape, args.repeats))
    return 0


def _add_pipeline(kinds) -> None:
    from ..cli import add_pipeline_flags

    p = kinds.add_parser("pipeline", help="K prompts: sequential vs DeDiVAE vs DeDiVAE + Aco")
    p.add_argument("--prompts", type=int, default=6, help="number of prompts (K)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs of the three modes (median reported)")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model)")
    p.add_argument("--config", help="YAML engine config; flags override it")
    p.add_argument("--ulysses", type=int)
    p.add_argument("--ring", type=int)
    p.add_argument("--height", type=int)
    p.add_argument("--width", type=int)
    p.add_argument("--num-frames", type=int)
    p.add_argument("--steps", type=int)
    add_pipeline_flags(p)
    p.set_defaults(run=_run_pipeline)


def _run_pipeline(args) -> int:
    from .pipeline import bench_pipeline
    from ..cli import pipeline_overrides
    from ..config import EngineConfig, load_config
    from ..errors import UserInputError
    from ..generate import request_from_config

    if args.prompts < 1 or args.repeats < 1:
        raise UserInputError(f"--prompts and --repeats must be at least 1, got {args.prompts} and {args.repeats}")
    config = load_config(args.config) if args.config else EngineConfig()
    config = config.with_overrides("model", path=args.model_path)
    config = config.with_overrides("parallel", ulysses=args.ulysses, ring=args.ring)
    if args.decode_ranks is None and config.parallel.decode_ranks == 0:
        args.decode_ranks = 1  # the benchmark is about decode ranks: 1 unless told otherwise
    config = pipeline_overrides(config, args)
    config = config.with_overrides("generation", height=args.height, width=args.width,
                                   num_frames=args.num_frames, steps=args.steps)
    template = request_from_config(config, "benchmark")
    print(bench_pipeline(config, template, args.prompts, args.repeats))
    return 0


def _add_handoff(kinds) -> None:
    p = kinds.add_parser("handoff", help="latent handoff: Ray object store vs torch.distributed p2p")
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(run=_run_handoff)


def _run_handoff(args) -> int:
    from .handoff import bench_handoff
    from ..errors import UserInputError

    if args.repeats < 1:
        raise UserInputError(f"--repeats must be at least 1, got {args.repeats}")
    print(bench_handoff(args.repeats))
    return 0


def _add_vae(kinds) -> None:
    p = kinds.add_parser("vae", help="VAE decode of one video shape: untiled vs tiled time, peak memory, difference")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model)")
    p.add_argument("--config", help="YAML engine config (device, dtype); flags override it")
    p.add_argument("--height", type=int, default=320, help="larger than one 256-pixel tile, so that tiling applies")
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--num-frames", type=int, default=9)
    p.add_argument("--tiling", choices=("both", "on", "off"), default="both", help="modes to run (both: off then on)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random latents")
    p.set_defaults(run=_run_vae)


def _run_vae(args) -> int:
    from ..adapter import VideoShape
    from .vae import bench_vae
    from ..config import EngineConfig, load_config

    config = load_config(args.config) if args.config else EngineConfig()
    config = config.with_overrides("model", path=args.model_path)
    shape = VideoShape(height=args.height, width=args.width, num_frames=args.num_frames)
    print(bench_vae(config, shape, args.tiling, args.seed))
    return 0


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="latency benchmarks")
    kinds = p.add_subparsers(dest="bench", required=True)
    _add_sp(kinds)
    _add_pipeline(kinds)
    _add_handoff(kinds)
    _add_vae(kinds)
    from .latency_cli import add_latency_parser
    from .load import add_load_parser

    add_latency_parser(kinds)
    add_load_parser(kinds)
