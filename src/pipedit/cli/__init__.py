"""pipedit's command line: serve, generate, render, benchmark, plan and check a node.

One module per command, each with `add_parser(sub)`; the work behind a command lives in its
subsystem, which never imports this package. Errors the user can fix print one line and exit 2
(argparse does the same for bad flags).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UserInputError
from ..logs import quiet_libraries
from . import bench, check_node, demo_checkpoint, dry_run, env, generate, plan, render, serve

EXIT_USER_ERROR = 2
# In the order `pipedit --help` lists them.
COMMANDS = (generate, demo_checkpoint, serve, bench, check_node, env, render, plan, dry_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipedit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_libraries()
    args = build_parser().parse_args(argv)
    if getattr(args, "address", None):  # read where Ray is attached (pipedit.runtime.ray_instance)
        os.environ["RAY_ADDRESS"] = args.address
    try:
        return args.run(args)
    except UserInputError as error:
        print(f"pipedit: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("pipedit: interrupted", file=sys.stderr)
        return 130
