"""`pipedit check-node` on CPU ranks: it runs the configurations and catches a mismatch."""

import pytest

from pipedit.machine.check import node_cases
from pipedit.cli import main

SMALL = ["--height", "64", "--width", "64", "--num-frames", "5", "--steps", "2"]


def test_cases_fit_the_node_and_the_model():
    names = [case.name for case in node_cases(8, heads=24)]
    assert names == ["ulysses 2", "ulysses 4", "ulysses 8", "ring 2", "usp 4x2", "ulysses 8 pipesp chunk 1",
                     "dedivae 7+1", "dedivae 7+1 aco"]
    assert all(case.ranks <= 8 for case in node_cases(8, heads=24))
    assert [case.name for case in node_cases(8, heads=4)][:2] == ["ulysses 2", "ulysses 4"]
    assert "dedivae 4+1" in [case.name for case in node_cases(8, heads=4)]  # a Ulysses rank needs a head


def test_check_node_passes_on_cpu_ranks_and_runs_the_reference_in_a_rank_process(ray_session, demo_checkpoint,
                                                                                 capsys, monkeypatch):
    """The cases pass; the reference ran in a rank process, never in the driver (on a GPU node it
    would hold a whole model on cuda:0): check_node's own call of run_reference, recorded."""
    import os

    from pipedit.machine import check

    references = []

    def recorded(config):
        references.append(run_reference(config))
        return references[-1]

    run_reference = check.run_reference
    monkeypatch.setattr(check, "run_reference", recorded)
    code = main(["check-node", "--model-path", str(demo_checkpoint), *SMALL, "--cases", "ulysses 2,dedivae 1+1 aco"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ulysses 2" in out and "dedivae 1+1 aco" in out and "2 passed, 0 failed" in out
    assert "Attention chosen (cpu float32)" in out  # measured in a Ray task, not in this driver
    (latents, step_s, pid), = references
    assert pid != os.getpid()
    assert sorted(latents) == sorted(check.PROMPTS) and step_s > 0


@pytest.mark.slow
def test_check_node_reports_a_mismatch(ray_session, demo_checkpoint, capsys):
    # Ring attention merges partial softmaxes in another order: ~1e-7 apart, so a zero tolerance fails.
    code = main(["check-node", "--model-path", str(demo_checkpoint), *SMALL, "--cases", "ring 2", "--tolerance", "0"])
    out = capsys.readouterr().out
    assert code == 1 and "MISMATCH" in out and "0 passed, 1 failed: ring 2" in out


def test_unknown_case_is_a_user_error(demo_checkpoint, capsys):
    assert main(["check-node", "--model-path", str(demo_checkpoint), "--cases", "ulysses 64"]) == 2
    assert "this node can run: ulysses 2" in capsys.readouterr().err
