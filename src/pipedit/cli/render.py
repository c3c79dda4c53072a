"""`pipedit render PROMPTS --out-dir DIR`: every prompt of a file, resumable (pipedit.render)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError
from .flags import add_engine_flags, engine_config, integer

DEFAULT_MAX_IN_FLIGHT = 4


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="render every prompt of a JSONL or text file (resumable)")
    p.add_argument("prompts", help="prompts file: JSONL (one object per line) or plain text (one prompt per line)")
    p.add_argument("--out-dir", required=True, help="folder for the mp4s and manifest.jsonl")
    p.add_argument("--endpoint", help="URL of a running `pipedit serve` (default: render in this process)")
    p.add_argument("--api-key", help="Bearer key for --endpoint")
    p.add_argument("--max-in-flight", type=integer, default=DEFAULT_MAX_IN_FLIGHT,
                   help=f"jobs submitted to --endpoint at once (default {DEFAULT_MAX_IN_FLIGHT})")
    add_engine_flags(p, seed_help="seed for lines that give none (default 0)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..render.batch import Batch
    from ..render.prompts import read_lines

    prompts, out_dir = Path(args.prompts), Path(args.out_dir)
    if not prompts.is_file():
        raise UserInputError(f"prompts file {prompts} does not exist; give a .jsonl or .txt file")
    if out_dir.exists() and not out_dir.is_dir():
        raise UserInputError(f"--out-dir {out_dir} is a file; give a folder (it is created if missing)")
    if args.max_in_flight < 1:
        raise UserInputError(f"--max-in-flight must be at least 1, got {args.max_in_flight}")
    config = engine_config(args)
    if args.endpoint:
        from ..render.remote import RemoteRunner, model_identity

        runner = RemoteRunner(args.endpoint, args.api_key, args.max_in_flight)
        lines = read_lines(prompts, config.generation, model_identity(args.endpoint))
    else:
        from ..lora.spec import LoraOffer
        from ..render.local import LocalRunner, line_validator, model_identity

        runner = LocalRunner(config)
        lines = read_lines(prompts, config.generation, model_identity(config), line_validator(config),
                           LoraOffer.of(config.model))
    if not lines:
        raise UserInputError(f"prompts file {prompts} has no prompts (blank lines and # comments are skipped)")
    return Batch(lines, out_dir).run(runner)
