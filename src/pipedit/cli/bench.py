"""`pipedit bench sp|pipeline|handoff|vae|latency|load|cache|lora|kernels`: the benchmarks of pipedit.bench.

Omitted shape flags take the config's generation defaults where a benchmark says so."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..errors import UserInputError
from .flags import (add_address_flag, add_cache_flag, add_compile_flag, add_idle_expert_flag, add_lora_flags,
                    add_pipeline_flags, add_shape_flags, base_config, lora, lora_overrides, pipeline_overrides)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="latency benchmarks")
    kinds = p.add_subparsers(dest="bench", required=True)
    from .bench_kernels import add_kernels

    for add in (_add_sp, _add_pipeline, _add_handoff, _add_vae, _add_latency, _add_load, _add_cache, _add_lora,
                add_kernels):
        add(kinds)
    for name, kind in kinds.choices.items():
        if name not in ("load", "kernels"):  # load talks HTTP to a server; kernels runs in this process
            add_address_flag(kind)


def _at_least_one(args, *names: str) -> None:
    for name in names:
        if getattr(args, name) < 1:
            raise UserInputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")


# -- argument types -----------------------------------------------------------------------------
def _chunks(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"chunk sizes must be integers >= 1, got '{text}'")
    return values


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


# -- sp -----------------------------------------------------------------------------------------
def _add_sp(kinds) -> None:
    from ..families import DEFAULT, family_names

    p = kinds.add_parser("sp", help="per-step latency: synchronous Ulysses vs PipeSP chunk sizes and auto")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model of --model)")
    p.add_argument("--model", choices=family_names(),
                   help=f"model family (default: found from --model-path; without a path, {DEFAULT})")
    p.add_argument("--config", help="YAML engine config; flags override it")
    p.add_argument("--single-device", action="store_true",
                   help="also time one step on a single device (in this process), the baseline row")
    p.add_argument("--ulysses", type=int, default=2)
    p.add_argument("--ring", type=int, default=1)
    add_shape_flags(p, {"height": 256, "width": 256, "num_frames": 33}, names=("height", "width", "num_frames"))
    p.add_argument("--chunks", type=_chunks, help="PipeSP chunk sizes, e.g. 1,2 (default: all auto considers)")
    p.add_argument("--repeats", type=int, default=10, help="timed rounds, modes interleaved (median reported)")
    p.add_argument("--attention-only", action="store_true",
                   help="time one attention call at a given head layout on local gloo ranks instead of model steps")
    p.add_argument("--heads", type=int, default=24, help="--attention-only: heads (HunyuanVideo: 24)")
    p.add_argument("--head-dim", type=int, default=128, help="--attention-only: head dim (HunyuanVideo: 128)")
    p.add_argument("--seq-len", type=int, default=4096, help="--attention-only: video tokens over all ranks")
    p.add_argument("--text-len", type=int, default=256, help="--attention-only: text tokens")
    add_compile_flag(p, help="also time the compiled model: eager and compiled tables, compile time per world")
    add_idle_expert_flag(p)
    add_lora_flags(p)
    p.set_defaults(run=_run_sp)


def _run_sp(args) -> int:
    from ..bench.sp import bench_sp
    from ..request import VideoRequest

    _at_least_one(args, "repeats")
    if args.attention_only:
        if args.compile:
            raise UserInputError("--compile times model steps; --attention-only times one attention call, which "
                                 "--compile leaves eager (collectives are never compiled): drop one of them")
        return _run_sp_attention(args)
    config = base_config(args).with_overrides("model", path=args.model_path, name=args.model, compile=args.compile,
                                              idle_expert=args.idle_expert, **lora_overrides(args))
    config = config.with_overrides("parallel", ulysses=args.ulysses, ring=args.ring)
    request = VideoRequest("a benchmark prompt: a red fox running through snow", height=args.height,
                           width=args.width, num_frames=args.num_frames, steps=1)
    print(bench_sp(config, request, args.chunks, args.repeats, single_device=args.single_device))
    return 0


def _run_sp_attention(args) -> int:
    from ..attention.autotune import AttentionShape
    from ..bench.sp import bench_sp_attention

    if args.ulysses < 2 or args.ulysses > args.heads:
        raise UserInputError(f"--ulysses must be between 2 and --heads ({args.heads}), got {args.ulysses}")
    if min(args.seq_len, args.head_dim) < 1 or args.text_len < 0:
        raise UserInputError("--seq-len and --head-dim must be >= 1 and --text-len >= 0")
    shape = AttentionShape(seq_len=args.seq_len, text_len=args.text_len, heads=args.heads, head_dim=args.head_dim)
    print(bench_sp_attention(args.ulysses, shape, args.repeats))
    return 0


# -- pipeline -----------------------------------------------------------------------------------
def _add_pipeline(kinds) -> None:
    p = kinds.add_parser("pipeline", help="K prompts: sequential vs DeDiVAE vs DeDiVAE + Aco")
    p.add_argument("--prompts", type=int, default=6, help="number of prompts (K)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs of the three modes (median reported)")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model)")
    p.add_argument("--config", help="YAML engine config; flags override it")
    p.add_argument("--ulysses", type=int)
    p.add_argument("--ring", type=int)
    add_shape_flags(p)
    add_pipeline_flags(p)
    add_cache_flag(p)
    add_lora_flags(p)
    p.set_defaults(run=_run_pipeline)


def _run_pipeline(args) -> int:
    from ..bench.pipeline import bench_pipeline
    from ..render.single import request_from_config

    _at_least_one(args, "prompts", "repeats")
    config = base_config(args).with_overrides("model", path=args.model_path, **lora_overrides(args))
    config = config.with_overrides("parallel", ulysses=args.ulysses, ring=args.ring)
    if args.decode_ranks is None and config.parallel.decode_ranks == 0:
        args.decode_ranks = 1  # the benchmark is about decode ranks: 1 unless told otherwise
    config = pipeline_overrides(config, args)
    config = config.with_overrides("generation", height=args.height, width=args.width,
                                   num_frames=args.num_frames, steps=args.steps, cache=args.cache)
    template = request_from_config(config, "benchmark")
    print(bench_pipeline(config, template, args.prompts, args.repeats))
    return 0


# -- handoff and vae ----------------------------------------------------------------------------
def _add_handoff(kinds) -> None:
    p = kinds.add_parser("handoff", help="latent handoff: Ray object store vs torch.distributed p2p")
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(run=_run_handoff)


def _run_handoff(args) -> int:
    from ..bench.handoff import bench_handoff

    _at_least_one(args, "repeats")
    print(bench_handoff(args.repeats))
    return 0


def _add_vae(kinds) -> None:
    p = kinds.add_parser("vae", help="VAE decode of one video shape: untiled vs tiled time, peak memory, difference")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model)")
    p.add_argument("--config", help="YAML engine config (device, dtype); flags override it")
    add_shape_flags(p, {"height": 320, "width": 320, "num_frames": 9}, names=("height", "width", "num_frames"),
                    helps={"height": "larger than one 256-pixel tile, so that tiling applies"})
    p.add_argument("--tiling", choices=("both", "on", "off"), default="both", help="modes to run (both: off then on)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random latents")
    p.add_argument("--ranks", type=int, default=1,
                   help="N >= 2: one decode split over N gloo ranks vs one rank, per rank (default: both demo models)")
    p.set_defaults(run=_run_vae)


def _run_vae(args) -> int:
    from ..adapter import VideoShape
    from ..bench.vae import bench_vae

    config = base_config(args).with_overrides("model", path=args.model_path)
    shape = VideoShape(height=args.height, width=args.width, num_frames=args.num_frames)
    _at_least_one(args, "ranks")
    if args.ranks > 1:
        from ..bench.vae import MODES
        from ..bench.vae_split import bench_vae_ranks, demo_paths

        print(bench_vae_ranks(demo_paths(config.model.path), shape, MODES[args.tiling], args.ranks, args.seed))
        return 0
    print(bench_vae(config, shape, args.tiling, args.seed))
    return 0


# -- latency ------------------------------------------------------------------------------------
def _add_latency(kinds) -> None:
    from ..bench.methods import METHODS

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
    add_lora_flags(p)
    p.set_defaults(run=_run_latency)


def _run_latency(args) -> int:
    from ..bench.latency import LatencySettings, bench_latency
    from ..bench.methods import parse_methods, total_ranks
    from ..bench.report import markdown

    _at_least_one(args, "prompts")
    if args.ranks is not None:
        _at_least_one(args, "ranks")
    config = base_config(args).with_overrides("model", path=args.model_path, **lora_overrides(args))
    g = config.generation
    settings = LatencySettings(
        resolutions=tuple(args.resolutions or [(g.width, g.height)]), frames=tuple(args.frames or [g.num_frames]),
        steps=tuple(args.steps or [g.steps]), prompts=args.prompts, methods=tuple(parse_methods(args.methods)),
        ranks=args.ranks or total_ranks(config.parallel), base_offload=args.base_offload,
    )
    out = Path(args.out or f"outputs/bench-latency-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    report = bench_latency(config, settings, out)
    print(markdown(report), end="")
    print(f"wrote {out / 'latency.json'}, {out / 'latency.md'}, {out / 'latency.png'}")
    return 0


# -- load ---------------------------------------------------------------------------------------
def _add_load(kinds) -> None:
    p = kinds.add_parser("load", help="a bounded burst of create requests against a server on loopback")
    p.add_argument("--endpoint", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--requests", type=int, default=30, help="create calls in all (default 30)")
    p.add_argument("--concurrency", type=int, default=10, help="calls in flight at once (default 10)")
    p.add_argument("--duration", type=float, help="send no new request after this many seconds")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for accepted jobs (default 600)")
    p.add_argument("--api-key", help="Bearer key, when the server has keys")
    p.add_argument("--prompt", default="a load test: a red fox running through snow")
    p.add_argument("--size", default="64x64", help="WIDTHxHEIGHT of each request (default 64x64)")
    add_shape_flags(p, {"num_frames": 5, "steps": 2}, names=("num_frames", "steps"),
                    helps={"steps": "num_inference_steps of each request (default 2)"})
    p.add_argument("--allow-remote", action="store_true", help="allow an endpoint that is not on loopback")
    p.add_argument("--slow-connections", type=int, default=0,
                   help="slow clients held open during the burst: half trickle a POST body, half a GET's "
                        "headers (default 0)")
    p.add_argument("--slow-interval", type=float, default=5.0,
                   help="seconds between a slow client's bytes or header lines (default 5); slow clients "
                        "also bring header floods, with the Serve proxy's memory before and after")
    p.add_argument("--event-streams", type=int, default=0,
                   help="after the burst, open this many event streams on one job and time /healthz (default 0)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.set_defaults(run=_run_load)


def _run_load(args) -> int:
    import json
    from urllib.parse import urlsplit

    from ..bench.load import is_loopback, run_load

    _at_least_one(args, "requests", "concurrency")
    if args.event_streams < 0:
        raise UserInputError(f"--event-streams must be 0 or more, got {args.event_streams}")
    if args.slow_connections < 0 or args.slow_interval <= 0:
        raise UserInputError(f"--slow-connections must be 0 or more and --slow-interval positive, got "
                             f"{args.slow_connections} and {args.slow_interval}")
    if args.duration is not None and args.duration <= 0:
        raise UserInputError(f"--duration must be a positive number of seconds, got {args.duration}")
    if urlsplit(args.endpoint).scheme not in ("http", "https"):
        raise UserInputError(f"--endpoint must be an http(s) URL such as http://127.0.0.1:8000, got {args.endpoint!r}")
    if not args.allow_remote and not is_loopback(args.endpoint):
        raise UserInputError(f"{args.endpoint} is not on loopback: a load burst is for a local server; "
                             f"pass --allow-remote to aim it elsewhere")
    body = {"prompt": args.prompt, "size": args.size, "num_frames": args.num_frames,
            "num_inference_steps": args.steps}
    report = run_load(args.endpoint, args.requests, args.concurrency, args.duration, body=body,
                      api_key=args.api_key, timeout=args.timeout, progress=not args.json,
                      slow_connections=args.slow_connections, slow_interval_s=args.slow_interval,
                      event_streams=args.event_streams)
    print(json.dumps(report.summary()) if args.json else report.text())
    return 0 if report.ok else 1


# -- cache --------------------------------------------------------------------------------------
def _add_cache(kinds) -> None:
    from ..bench.cache import DEFAULT_CACHES
    from ..families import benched

    p = kinds.add_parser("cache", help="step caching per model family and setting: evaluations skipped, latency, "
                                       "difference from the uncached run (JSON, Markdown)")
    p.add_argument("--config", help="YAML engine config (device, dtype); flags override it")
    p.add_argument("--models", default=",".join(benched("cache")),
                   help="comma-separated families, each run on its embedded demo model (default: %(default)s)")
    p.add_argument("--model-path", help="checkpoint folder of the one family in --models (default: its demo model)")
    p.add_argument("--caches", default=",".join(DEFAULT_CACHES),
                   help=f"comma-separated settings, fbcache:T or teacache:T (default {','.join(DEFAULT_CACHES)})")
    add_shape_flags(p, {"height": 96, "width": 96, "num_frames": 9, "steps": 12})
    p.add_argument("--repeats", type=int, default=1, help="timed runs per setting (median reported)")
    p.add_argument("--out", help="output folder (default: outputs/bench-cache-<UTC time>)")
    p.set_defaults(run=_run_cache)


def _run_cache(args) -> int:
    from ..adapter import check_model_name
    from ..bench.cache import CacheBenchSettings, bench_cache, markdown

    _at_least_one(args, "steps", "repeats")
    families = tuple(m.strip() for m in args.models.split(",") if m.strip())
    for family in families:
        check_model_name(family)
    caches = tuple(c.strip() for c in args.caches.split(",") if c.strip())
    config = base_config(args).with_overrides("model", path=args.model_path)
    if config.model.path is not None and len(families) != 1:
        raise UserInputError(f"a model path belongs to one family: give --models with one of them, got {args.models}")
    settings = CacheBenchSettings(families, caches, args.height, args.width, args.num_frames, args.steps, args.repeats)
    out = Path(args.out or f"outputs/bench-cache-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    report = bench_cache(config, settings, out)
    print(markdown(report), end="")
    print(f"wrote {out / 'cache.json'}, {out / 'cache.md'}")
    return 0


# -- lora ---------------------------------------------------------------------------------------
def _add_lora(kinds) -> None:
    from ..families import family_names

    p = kinds.add_parser("lora", help="LoRA adapters: seconds per step with 0, 1 and 2 unfused adapters and fused, "
                                      "and the switch between requests' adapters (JSON, Markdown)")
    p.add_argument("--config", help="YAML engine config (device, dtype, layout); flags override it")
    p.add_argument("--model-path", help="checkpoint folder (default: the embedded demo model of --model)")
    p.add_argument("--model", choices=family_names(), help="model family (default: found from --model-path)")
    p.add_argument("--lora", type=lora, action="append",
                   help="an adapter file to time (at most two; default: adapters written with random weights)")
    p.add_argument("--rank", type=int, default=32, help="rank of the random adapters (default 32)")
    add_shape_flags(p, {"height": 96, "width": 96, "num_frames": 9, "steps": 4},
                    helps={"steps": "denoising steps per request (default 4)"})
    p.add_argument("--repeats", type=int, default=3, help="timed runs per mode (median reported; default 3)")
    p.add_argument("--out", help="output folder (default: outputs/bench-lora-<UTC time>)")
    p.set_defaults(run=_run_lora)


def _run_lora(args) -> int:
    from ..bench.lora import LoraBenchSettings, bench_lora, markdown

    _at_least_one(args, "rank", "steps", "repeats", "height", "width", "num_frames")
    if args.lora and len(args.lora) > 2:
        raise UserInputError(f"bench lora times at most two adapters, got {len(args.lora)} --lora files")
    config = base_config(args).with_overrides("model", path=args.model_path, name=args.model,
                                              run_loras=tuple(args.lora) if args.lora else ())
    settings = LoraBenchSettings(args.height, args.width, args.num_frames, args.steps, args.repeats, args.rank)
    out = Path(args.out or f"outputs/bench-lora-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    report = bench_lora(config, settings, out)
    print(markdown(report), end="")
    print(f"wrote {out / 'lora.json'}, {out / 'lora.md'}")
    return 0
