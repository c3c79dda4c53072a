"""`pipedit env`: runs anywhere (no GPU needed); every expected value is computed here."""

import json
import os
import platform
import re
import stat

import pytest
import torch

from pipedit.machine import environment
from pipedit.attention.kernel_probe import NEEDS_CUDA, OK, SDPA_BACKENDS
from pipedit.attention.kernels import attention_kernels
from pipedit.cli import main


def _documented_keys():
    # Top-level keys are the docstring lines indented by two spaces, name then two spaces.
    return re.findall(r"^  (\w+)  ", environment.__doc__, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def report():
    return environment.gather()


def test_text_names_torch_and_the_gpus(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert torch.__version__ in out
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    assert gpu in out


def test_json_has_the_documented_keys_and_types(capsys):
    assert main(["env", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == _documented_keys()
    versions = data["versions"]
    assert versions["torch"] == torch.__version__ and versions["python"] == platform.python_version()
    assert versions["cuda"] == torch.version.cuda
    assert all(value is None or isinstance(value, str) for value in versions.values())
    assert data["cpu_count"] == os.cpu_count() and 1 <= data["cpu_usable"] <= data["cpu_count"]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert len(data["gpus"]) == count and len(data["peer_access"]) == count * (count - 1)
    assert isinstance(data["topology"], str)
    assert set(data["attention"]["kernels"]) == {entry.name for entry in attention_kernels()}
    assert set(data["attention"]["sdpa_backends"]) == set(SDPA_BACKENDS)


def test_sdpa_works_and_gpu_kernels_need_cuda_on_cpu(report):
    attention = report["attention"]
    assert attention["kernels"]["sdpa"] == OK
    if attention["device"] == "cpu":
        cuda_only = [entry.name for entry in attention_kernels() if entry.cuda_only]
        assert cuda_only and all(attention["kernels"][name] == NEEDS_CUDA for name in cuda_only)


def test_text_lists_gpus_and_the_peer_matrix(report):
    fake = dict(report, gpus=[
        {"index": i, "name": f"Card {i}", "total_memory_bytes": 80 * 2**30,
         "free_memory_bytes": None if i else 79 * 2**30, "compute_capability": "9.0"} for i in range(2)
    ], peer_access=[{"from": 0, "to": 1, "ok": True}, {"from": 1, "to": 0, "ok": False}])
    text = environment.format_text(fake)
    assert "[0] Card 0: 80.0 GiB total, 79.0 GiB free, compute capability 9.0" in text
    assert "[1] Card 1: 80.0 GiB total, free unknown" in text
    rows = text.split("Peer access")[1].splitlines()
    assert rows[2].split() == ["0", "-", "ok"] and rows[3].split() == ["1", "no", "-"]


def _fake_nvidia_smi(folder, script):
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_topology_is_nvidia_smi_output_or_its_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert environment.topology() == "nvidia-smi not found"
    _fake_nvidia_smi(tmp_path, 'echo "GPU0 X NV18"\necho "GPU1 NV18 X"\n')
    assert environment.topology() == "GPU0 X NV18\nGPU1 NV18 X"
    _fake_nvidia_smi(tmp_path, 'echo "NVML: driver mismatch" >&2\necho more >&2\nexit 9\n')
    assert environment.topology() == "nvidia-smi topo -m failed: NVML: driver mismatch"
