"""`pipedit env`: what this machine has (the report lives in pipedit.machine.environment, which imports torch)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("env", help="versions, GPUs, interconnect and working attention kernels of this machine")
    p.add_argument("--json", action="store_true", help="print one JSON object (keys: see pipedit.machine.environment)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..machine.environment import format_json, format_text, gather

    report = gather()
    print(format_json(report) if args.json else format_text(report))
    return 0
