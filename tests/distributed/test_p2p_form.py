"""One point-to-point form everywhere (NCCL matches batched and single P2P on different
communicators, so mixing them hangs; gloo can't show it, so the source is checked)."""

import ast
from pathlib import Path

import pipedit
import pipedit.integrations
import torch

from pipedit.distributed.spawn import run_on_gloo_ranks

SINGLE_FORMS = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}
HELPER = Path(pipedit.__file__).parent / "distributed" / "p2p.py"


def _sources():
    for package in (pipedit, pipedit.integrations):
        yield from Path(package.__file__).parent.rglob("*.py")


def _p2p_calls(file: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SINGLE_FORMS:
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in ("dist", "distributed"):
                calls.append(f"{file.name}:{node.lineno} dist.{node.func.attr}")
    return calls


def test_no_module_but_the_helper_posts_point_to_point():
    files = list(_sources())
    assert HELPER in files and len(files) > 20
    assert _p2p_calls(HELPER) == [f"p2p.py:{_line(HELPER, 'batch_isend_irecv(ops)')} dist.batch_isend_irecv"]
    offenders = [call for file in files if file != HELPER for call in _p2p_calls(file)]
    assert offenders == []


def _line(file: Path, text: str) -> int:
    return next(i for i, line in enumerate(file.read_text().splitlines(), 1) if text in line)


def _handoff_rank(rank, world_size):
    from pipedit.distributed.p2p import post

    if rank == 0:
        post(sends=[(torch.arange(6.0), 1), (torch.ones(2), 2)]).wait()
        return None
    buffer = torch.empty(6 if rank == 1 else 2)
    post(recvs=[(buffer, 0)]).wait()
    return buffer.tolist()


def test_post_moves_tensors_between_gloo_ranks():
    assert run_on_gloo_ranks(_handoff_rank, 3) == [None, [0, 1, 2, 3, 4, 5], [1.0, 1.0]]
