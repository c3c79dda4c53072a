"""`pipedit bench ...` sub-commands."""

from __future__ import annotations


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="latency benchmarks")
    kinds = p.add_subparsers(dest="bench", required=True)
    del kinds  # benchmarks register here
