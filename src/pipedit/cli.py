"""pipedit's command line: generate videos, build the demo checkpoint, run benchmarks.

Errors the user can fix print one line and exit 2 (argparse does the same for bad flags).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import UserInputError
from .logs import quiet_libraries

EXIT_USER_ERROR = 2


def _int(text: str) -> int:
    # Range checks belong to the request and config validation, which name what is allowed.
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None


def _chunk(text: str) -> int | str:
    if text in ("auto", "off"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, 'auto' or 'off', got '{text}'") from None


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate one video from a prompt")
    p.add_argument("--prompt", required=True, help="text describing the video")
    p.add_argument("--output", required=True, help="path of the mp4 to write")
    p.add_argument("--save-latents", help="also save the final latents (torch.save) to this path")
    add_engine_flags(p, seed_help="seed of the CPU torch.Generator that draws the initial noise")
    p.set_defaults(run=_run_generate)


def add_engine_flags(p, seed_help: str) -> None:
    """Model, generation and parallel flags, shared by generate and render (see engine_config)."""
    p.add_argument("--model-path", help="checkpoint folder: diffusers layout, or the official Open-Sora-Plan "
                                        "v1.3 layout (default: the embedded demo model)")
    add_model_flags(p)
    p.add_argument("--config", help="YAML engine config (see configs/); flags override it")
    p.add_argument("--height", type=_int)
    p.add_argument("--width", type=_int)
    p.add_argument("--num-frames", type=_int)
    p.add_argument("--steps", type=_int, help="denoising steps")
    p.add_argument("--guidance-scale", type=float, help="embedded guidance scale (HunyuanVideo default 6.0)")
    p.add_argument("--seed", type=_int, help=seed_help)
    p.add_argument("--fps", type=_int)
    p.add_argument("--ulysses", type=_int, help="Ulysses sequence-parallel degree")
    p.add_argument("--ring", type=_int, help="Ring sequence-parallel degree")
    p.add_argument("--pipesp-chunk", type=_chunk, help="heads per PipeSP chunk: N, auto or off")
    p.add_argument("--cfg-parallel", action="store_true", default=None,
                   help="guidance's conditional and unconditional passes on two rank groups (models with CFG)")
    p.add_argument("--vae-tiling", choices=("auto", "on", "off"),
                   help="tiled VAE decode: auto (on CUDA when an untiled decode would not fit), on or off")
    add_pipeline_flags(p)


def add_model_flags(p) -> None:
    from .adapter import MODEL_NAMES

    p.add_argument("--model", choices=MODEL_NAMES,
                   help="model family (default: model_index.json decides, else the official layout found)")
    p.add_argument("--text-encoder-path",
                   help="opensora-plan: mT5 encoder + tokenizer folder as google/mt5-xxl is published "
                        "(default: MODEL_PATH/text_encoder)")


def _decode_ranks(text: str) -> int | str:
    return text if text == "auto" else _int(text)


def add_pipeline_flags(p) -> None:
    """DeDiVAE and Aco flags, shared by generate and bench pipeline."""
    p.add_argument("--decode-ranks", type=_decode_ranks,
                   help="VAE decode ranks beside the denoise ranks (DeDiVAE): N, or auto (balance rule; needs --ranks)")
    p.add_argument("--ranks", type=_int, help="total ranks (denoise + decode); with --decode-ranks auto")
    p.add_argument("--aco", choices=("off", "on", "auto"), help="idle decode ranks compute attention heads")
    p.add_argument("--text-encoder", choices=("auto", "dit", "vae"), help="which group holds the text encoders")
    p.add_argument("--handoff", choices=("object_store", "p2p"), help="latent handoff from denoise to decode ranks (default p2p)")


def _add_demo_checkpoint(sub) -> None:
    from pipedit.integrations.hunyuan_video.presets import DEFAULT_PRESET, PRESETS

    p = sub.add_parser("demo-checkpoint", help="write an offline synthetic checkpoint (default: the tiny HunyuanVideo demo)")
    p.add_argument("directory", help="folder to create (the model's release layout)")
    p.add_argument("--model", choices=("hunyuan-video", "opensora-plan"), default="hunyuan-video",
                   help="opensora-plan: a tiny model in the official v1.3 layout (any93x640x640/, vae/, text_encoder/)")
    p.add_argument("--preset", default=DEFAULT_PRESET,
                   help="; ".join(f"{name}: {about}" for name, (_, _, about) in PRESETS.items()))
    p.set_defaults(run=_run_demo_checkpoint)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipedit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_demo_checkpoint(sub)
    from .bench.cli import add_bench_parser
    from .check_node_cli import add_check_node_parser
    from .env_cli import add_env_parser
    from .plan_cli import add_plan_parser
    from .render.cli import add_render_parser
    from .serve_cli import add_serve_parser

    add_serve_parser(sub)
    add_bench_parser(sub)
    add_check_node_parser(sub)
    add_env_parser(sub)
    add_render_parser(sub)
    add_plan_parser(sub)
    return parser


def engine_config(args):
    """The EngineConfig of add_engine_flags' flags: the --config file, flags override it."""
    from .config import EngineConfig, load_config

    config = load_config(args.config) if args.config else EngineConfig()
    config = config.with_overrides("model", path=args.model_path, vae_tiling=args.vae_tiling, name=args.model,
                                   text_encoder_path=args.text_encoder_path)
    config = config.with_overrides("parallel", ulysses=args.ulysses, ring=args.ring, pipesp_chunk=args.pipesp_chunk,
                                   cfg_parallel=args.cfg_parallel)
    config = pipeline_overrides(config, args)
    return config.with_overrides(
        "generation", height=args.height, width=args.width, num_frames=args.num_frames, steps=args.steps,
        guidance_scale=args.guidance_scale, seed=args.seed, fps=args.fps,
    )


def pipeline_overrides(config, args):
    return config.with_overrides(
        "parallel", decode_ranks=args.decode_ranks, ranks=args.ranks, aco=args.aco,
        text_encoder=args.text_encoder, handoff=args.handoff,
    )


def _run_generate(args) -> int:
    from .generate import generate_to_file

    config = engine_config(args)
    output = generate_to_file(config, args.prompt, Path(args.output), args.save_latents)
    print(output.resolve())
    return 0


def _run_demo_checkpoint(args) -> int:
    from pipedit.integrations.hunyuan_video.presets import DEFAULT_PRESET, write_preset

    if args.model == "opensora-plan":
        from pipedit.integrations.opensora_plan.demo_checkpoint import write_demo_cli

        if args.preset != DEFAULT_PRESET:
            raise UserInputError("--preset applies to hunyuan-video only")
        print(write_demo_cli(args.directory))
        return 0
    try:
        path = write_preset(args.directory, args.preset)
    except FileExistsError as error:
        raise UserInputError(str(error)) from None
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except UserInputError as error:
        print(f"pipedit: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("pipedit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
