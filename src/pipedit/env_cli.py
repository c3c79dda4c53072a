"""`pipedit env` sub-command (the report itself lives in env_report, which imports torch)."""

from __future__ import annotations


def add_env_parser(sub) -> None:
    p = sub.add_parser("env", help="versions, GPUs, interconnect and working attention kernels of this machine")
    p.add_argument("--json", action="store_true", help="print one JSON object (keys: see pipedit.env_report)")
    p.set_defaults(run=_run_env)


def _run_env(args) -> int:
    from .env_report import format_json, format_text, gather

    report = gather()
    print(format_json(report) if args.json else format_text(report))
    return 0
