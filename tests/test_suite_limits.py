"""The suite's own limits: a hung test fails alone, by name (pytest-timeout, pyproject's `timeout`),
and the rest of the run goes on; the /healthz probe checks (tests/health_probes.py) pass a busy
machine's few slow probes and fail a front that waits."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from health_probes import DESIGN_S, LIMIT_S, ProbeTimes

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_has_a_time_limit():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 60 <= int(options["timeout"]) <= 1800  # over the slowest test on a busy machine, under CI's limit


def test_a_hung_test_fails_by_name_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hangs():\n    time.sleep(600)\n\n"
                                           "def test_after_the_hang():\n    assert True\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=2",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_hang.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    assert "FAILED test_hang.py::test_hangs" in done.stdout and "Timeout" in done.stdout, done.stdout
    assert "1 failed, 1 passed" in done.stdout, done.stdout


def test_probe_times_allow_a_busy_machines_few_slow_probes():
    probes = ProbeTimes()
    probes.seconds = [0.05] * 30 + [2.5, 3.1, DESIGN_S + 0.1]  # three stretched by other work
    probes.check()


@pytest.mark.parametrize("slow_share", [0.5, 1.0])
def test_probe_times_fail_a_front_that_waits(slow_share):
    probes = ProbeTimes()
    slow = int(20 * slow_share)
    probes.seconds = [0.05] * (20 - slow) + [LIMIT_S / 2] * slow  # each waiting for the fault's end
    with pytest.raises(AssertionError, match=f"{slow} of 20 /healthz probes"):
        probes.check()
