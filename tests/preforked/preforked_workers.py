"""Ray workers of the test session start as forked copies of one preloaded interpreter.

A Ray worker process (a rank, a replica, any actor) spends about 5 CPU-seconds importing torch and
diffusers' models before it runs anything, and the suite starts over a hundred of them. Here a
server per pytest process imports those once (PRELOAD); Ray starts each worker through
preforked_launcher.py (its runtime_env `py_executable`, set by `runtime_env_hook` on every
`ray.init` of the test session, in servers the tests start too), and the launcher has the server
fork a copy that runs Ray's worker entry point in the launcher's environment, with its stdio.

The product does not use this: a worker there is the fresh interpreter Ray starts. The launcher
falls back to exactly that where no server answers or where the worker's environment differs from
the server's in a variable read at import time. PIPEDIT_TEST_PREFORK=0 turns it off.

Hazards, each handled below:
- A fork copies only the forking thread: the server never starts a thread and never runs a torch
  op (torch's thread pools start on the first op), and refuses to fork if it finds a second thread.
- Modules read some environment variables when imported: the server imports with the test
  session's values, and a worker asking for others starts fresh (the launcher compares).
- OMP_NUM_THREADS: the OpenMP runtime reads it when torch loads it. Ray gives a 1-CPU worker
  OMP_NUM_THREADS=1 after it starts, so the server loads torch with 1.
- Ray tracks the process it started (the launcher): the launcher forwards signals to the copy and
  exits as the copy did; when the launcher dies, the server kills the copy.
"""

from __future__ import annotations

import array
import atexit
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

from preforked_launcher import SERVER_ENV, import_time_env, log

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK = "preforked_workers.runtime_env_hook"
# What a rank (DenoiseWorker, DecodeWorker) imports, but Ray: Ray's core library reads some of
# the worker's environment (RAY_JOB_ID, RAY_RAYLET_PID) when it loads, so each copy loads it
# (0.2 CPU-s after torch).
PRELOAD = ("torch", "numpy", "diffusers", "diffusers.models.transformers", "diffusers.models.autoencoders", "peft",
           "pipedit.runtime.worker", "pipedit.runtime.decode_worker", "fastapi", "uvicorn")


def runtime_env_hook(runtime_env: dict | None) -> dict:
    """RAY_RUNTIME_ENV_HOOK: every ray.init's job starts its workers through the launcher."""
    runtime_env = dict(runtime_env or {})
    runtime_env.setdefault("py_executable", f"{sys.executable} -S {HERE}/preforked_launcher.py")
    return runtime_env


_server: subprocess.Popen | None = None


def server_pid() -> int | None:
    """This process's server, if it started one."""
    return _server.pid if _server is not None else None


def start() -> None:
    """Starts this pytest process's server and points Ray's workers (this process's, and those of
    the servers it starts) at it; the server ends with this process."""
    if os.environ.get(SERVER_ENV) == "0" or not hasattr(os, "fork"):
        return
    folder = tempfile.mkdtemp(prefix="pipedit-prefork-")
    path = os.path.join(folder, "server")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    os.environ[SERVER_ENV] = path
    os.environ["RAY_RUNTIME_ENV_HOOK"] = HOOK
    # The server imports with OMP_NUM_THREADS=1 (see above).
    global _server
    _server = server = subprocess.Popen([sys.executable, __file__, path], stdin=subprocess.DEVNULL,
                                        env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)

    def stop():
        server.kill()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)


def serve(path: str) -> None:
    greeting = (json.dumps(import_time_env(os.environ)) + "\n").encode()
    for name in PRELOAD:
        importlib.import_module(name)
    if len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("preforked_workers: a preloaded module started a thread; not forking")
    if "ray._raylet" in sys.modules:
        raise SystemExit("preforked_workers: a preloaded module loaded Ray's core library; not forking")
    parent = os.getppid()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".binding")
    listener.listen(128)
    os.rename(path + ".binding", path)  # launchers connect only once it listens
    greeted: list[socket.socket] = []  # launchers whose request is still to come
    copies: dict[int, socket.socket | None] = {}  # copy's pid -> its launcher (None: it left)
    while os.getppid() == parent:
        launchers = [launcher for launcher in copies.values() if launcher is not None]
        readable, _, _ = select.select([listener, wake_read, *greeted, *launchers], [], [], 1.0)
        for ready in readable:
            if ready is listener:
                launcher, _ = listener.accept()
                launcher.sendall(greeting)
                greeted.append(launcher)
            elif ready == wake_read:
                os.read(wake_read, 512)
            elif ready in greeted:
                greeted.remove(ready)
                _fork_copy(ready, listener, greeted, copies, (wake_read, wake_write))
            else:  # a launcher ended (killed: it never sends after its request): its copy goes too
                pid = next(pid for pid, launcher in copies.items() if launcher is ready)
                _kill(pid)
                ready.close()
                copies[pid] = None
        _reap(copies)
    for pid in copies:
        _kill(pid)


def _fork_copy(launcher, listener, greeted, copies, wake_fds) -> None:
    try:
        request, fds = _receive(launcher)
    except (OSError, ValueError, ConnectionError):
        launcher.close()
        return
    pid = os.fork()
    if pid == 0:
        for other in [listener, *greeted, *filter(None, copies.values())]:
            other.close()
        signal.set_wakeup_fd(-1)
        for fd in wake_fds:
            os.close(fd)
        _run_copy(launcher, request, fds)
    for fd in fds:
        os.close(fd)
    copies[pid] = launcher
    launcher.sendall(f"{pid}\n".encode())
    log(f"forked {pid}")


def _receive(launcher: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = launcher.recvmsg(1 << 16, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if len(fds) != 3 or len(data) < 8:
        raise ValueError("a launcher's request without its stdio")
    size, body = int.from_bytes(data[:8], "big"), data[8:]
    while len(body) < size:
        more = launcher.recv(size - len(body))
        if not more:
            raise ConnectionError("the launcher left")
        body += more
    return json.loads(body), list(fds)


def _run_copy(launcher: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked copy: becomes the worker Ray asked for, and never returns to the server's loop."""
    code = 1
    try:
        launcher.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.setsid()  # as a worker Ray starts: no signal to the server's group reaches it
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if "numpy" in sys.modules:  # a fresh interpreter seeds numpy's global generator anew
            sys.modules["numpy"].random.seed()
        sys.argv = list(request["argv"])
        import runpy

        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - printed where the worker's stderr goes
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(copies: dict) -> None:
    while copies:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        launcher = copies.pop(pid, None)
        if launcher is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            try:
                launcher.sendall(f"{code}\n".encode())
            except OSError:
                pass
            launcher.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    serve(sys.argv[1])
