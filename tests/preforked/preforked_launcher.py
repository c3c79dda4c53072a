"""The Python that Ray starts the test session's workers with (runtime_env py_executable, set by
preforked_workers.runtime_env_hook): asks the preloading server (PIPEDIT_TEST_PREFORK) for a copy
of itself that runs this worker, then stays until that copy ends and exits as it did.

Where no server answers, or the worker's environment differs from the server's in a variable that
modules read when imported, the worker runs in a fresh interpreter exactly as Ray starts it.

Run with `python -S`: the standard library only (it starts once per worker)."""

import array
import json
import os
import signal
import socket
import sys

SERVER_ENV = "PIPEDIT_TEST_PREFORK"
LOG_ENV = "PIPEDIT_TEST_PREFORK_LOG"  # a file to note each start in (forked, or fresh and why)
# Variables read when a module is imported (the server imported its modules with its own values):
# the interpreter's, the thread pools' (at library load), torch's, the hub's, diffusers' and
# transformers', and pipedit's families and generation field modules (pipedit.fields reads both).
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "TORCH", "PYTORCH", "CUDA", "HF_", "HUGGINGFACE",
                        "DIFFUSERS", "TRANSFORMERS", "TOKENIZERS", "PIPEDIT_FAMILIES", "PIPEDIT_FIELD_MODULES")
# Of those, read when used, not when imported (Ray and inductor set them in the test process).
READ_WHEN_USED = ("PYTHONBREAKPOINT", "TORCHINDUCTOR_CACHE_DIR")
# Forwarded to the copy: what Ray (or a test) sends the process it started.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def import_time_env(env) -> dict:
    # OMP_NUM_THREADS=1 is what Ray gives a 1-CPU worker once it runs, and what the server loaded torch with.
    return {name: value for name, value in env.items() if name.startswith(IMPORT_TIME_PREFIXES)
            and name not in READ_WHEN_USED and (name, value) != ("OMP_NUM_THREADS", "1")}


def fresh(argv):
    os.execv(sys.executable, [sys.executable, *argv])


def log(line: str) -> None:
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a") as out:
            out.write(line + "\n")


def main(argv):
    path = os.environ.get(SERVER_ENV)
    if not path:
        fresh(argv)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        replies = conn.makefile("r")
        server_env = json.loads(replies.readline())
    except (OSError, ValueError):
        log(f"fresh {os.getpid()}: no server")
        fresh(argv)
    differing = sorted(set(server_env.items()) ^ set(import_time_env(os.environ).items()))
    if differing:
        conn.close()
        log(f"fresh {os.getpid()}: import-time environment differs: {sorted({name for name, _ in differing})}")
        fresh(argv)
    request = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    conn.sendmsg([len(request).to_bytes(8, "big") + request],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    reply = replies.readline()  # the copy's pid; empty if the server could not fork
    if not reply:
        log(f"fresh {os.getpid()}: the server did not fork")
        fresh(argv)
    pid = int(reply)

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    status = replies.readline()  # the copy's end; empty if the server ended first
    code = int(status) if status else 1
    if code < 0:  # the copy was killed by a signal: end the same way
        if -code in FORWARDED_SIGNALS:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
