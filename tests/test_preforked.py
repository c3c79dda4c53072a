"""The suite's Ray workers start as forked copies of a preloaded interpreter (tests/preforked):
a copy is the worker Ray asked for (its environment, its stdio, its exit status and signals), and
a worker whose import-time environment differs starts fresh."""

import os
import signal
import subprocess
import sys
import time

import pytest

import preforked_workers
from preforked_launcher import SERVER_ENV

pytestmark = pytest.mark.skipif(not preforked_workers.server_pid(), reason=f"{SERVER_ENV}=0: workers start fresh")

LAUNCHER = [sys.executable, "-S", os.path.join(preforked_workers.HERE, "preforked_launcher.py")]


@pytest.fixture(scope="module")
def server_ready():
    path = os.environ[SERVER_ENV]
    deadline = time.monotonic() + 120  # it imports torch and diffusers first
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "the preloading server never listened"
        time.sleep(0.2)
    return preforked_workers.server_pid()


def _script(tmp_path, body: str) -> str:
    script = tmp_path / "worker.py"
    script.write_text("import os, sys, time\n" + body)
    return str(script)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def test_a_copy_runs_with_the_launchers_arguments_environment_folder_and_exit_status(server_ready, tmp_path):
    script = _script(tmp_path, "print(os.getppid(), sys.argv[1:], os.environ['WORKER_NOTE'], os.getcwd());"
                               "sys.exit(3)")
    done = subprocess.run([*LAUNCHER, script, "a", "b"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "WORKER_NOTE": "given"})
    assert done.returncode == 3, done.stderr
    parent, rest = done.stdout.split(" ", 1)
    assert int(parent) == server_ready  # a copy, not a fresh interpreter
    assert rest.strip() == f"['a', 'b'] given {tmp_path}"


def test_a_worker_asking_for_another_import_time_environment_starts_fresh(server_ready, tmp_path):
    script = _script(tmp_path, "print(os.getppid(), 'torch' in sys.modules)")
    done = subprocess.run([*LAUNCHER, script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"})
    assert done.returncode == 0, done.stderr
    parent, preloaded = done.stdout.split()
    assert int(parent) != server_ready and preloaded == "False"


def test_signals_reach_the_copy_and_a_killed_launcher_takes_its_copy_along(server_ready, tmp_path):
    # The copy answers SIGTERM by killing itself with SIGKILL: the launcher ends that way only if it
    # forwarded the signal (unforwarded, SIGTERM would end the launcher itself) and ends as its copy did.
    script = _script(tmp_path, "import signal\n"
                               "def ended(*_):\n    print('got', signal.SIGTERM.value, flush=True); "
                               "os.kill(os.getpid(), signal.SIGKILL)\n"
                               "signal.signal(signal.SIGTERM, ended)\n"
                               "print(os.getpid(), flush=True); time.sleep(600)")
    launchers = [subprocess.Popen([*LAUNCHER, script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        copies = [int(launcher.stdout.readline()) for launcher in launchers]
        assert all(_parent_of(pid) == server_ready for pid in copies)
        launchers[0].send_signal(signal.SIGTERM)
        assert launchers[0].wait(timeout=30) == -signal.SIGKILL
        assert launchers[0].stdout.read() == f"got {signal.SIGTERM.value}\n"
        launchers[1].kill()  # as Ray kills a worker it started: the server kills the copy
        launchers[1].wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(os.path.exists(f"/proc/{pid}") for pid in copies):
            assert time.monotonic() < deadline, "a copy outlived its launcher"
            time.sleep(0.1)
    finally:
        for launcher in launchers:
            launcher.kill()
            launcher.wait()


def test_the_sessions_ray_actors_are_copies(ray_session, server_ready):
    @ray_session.remote(num_cpus=1)
    def parent_and_threads():
        import torch

        return os.getppid(), torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")

    assert ray_session.get(parent_and_threads.remote(), timeout=120) == (server_ready, 1, "1")
