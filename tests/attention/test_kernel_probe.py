"""The attention kernel probe turns every outcome into a status and never raises."""

import torch

from pipedit.attention import kernel_probe
from pipedit.attention.kernel_probe import NOT_INSTALLED, OK, run_probe
from pipedit.attention.kernels import BACKENDS, KernelEntry, attention_kernels

CPU = torch.device("cpu")


def test_probes_every_kernel_of_the_table_and_every_backend_attention_kernel_can_pick():
    probed = set(kernel_probe.probe_attention()["kernels"])
    assert probed == {entry.name for entry in attention_kernels()} and probed >= set(BACKENDS) - {"auto"}


def test_a_correct_kernel_is_ok():
    assert run_probe(kernel_probe._sdpa, CPU) == OK


def test_a_failing_kernel_reports_its_first_line():
    def broken(q, k, v):
        raise RuntimeError("no kernel image is available\nsecond line")

    assert run_probe(broken, CPU) == "error: no kernel image is available"


def test_a_wrong_result_is_an_error():
    status = run_probe(lambda q, k, v: torch.zeros_like(q), CPU)
    assert status.startswith("error: wrong result")


def test_a_missing_package_is_not_installed(monkeypatch):
    missing = KernelEntry("missing", "no_such_attention_package", True, False, lambda: None)
    assert kernel_probe.probe_entry(missing, CPU) == NOT_INSTALLED


def test_cpu_sdpa_backends_with_a_cpu_kernel_work():
    for name, (_, _, cuda_only) in kernel_probe.SDPA_BACKENDS.items():
        result = kernel_probe.probe_sdpa_backend(name, CPU)
        assert isinstance(result["enabled"], bool)
        if not cuda_only:
            assert result["status"] == OK, name
