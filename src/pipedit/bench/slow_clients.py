"""What runs beside a load burst (`pipedit bench load`): slow clients held open against the server,
and a prober timing GET /healthz.

Slow clients (`--slow-connections N`), as a review saw them: half send a POST whose body comes one
byte every `interval_s`, half a GET whose header lines come one every `interval_s`. Each stays open
until the server ends it; then another is opened in its place, so N are open all along. How the
server ended them (an HTTP status such as 408, or a close without an answer) is counted."""

from __future__ import annotations

import selectors
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from urllib.parse import urlsplit

PROBE_EVERY_S = 0.1


class _Background:
    """A daemon thread running `_run` from `with` entry until exit (`_stop` then set)."""

    def __init__(self, name: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        raise NotImplementedError


class SlowClients(_Background):
    def __init__(self, endpoint: str, count: int, interval_s: float = 5.0):
        super().__init__("slow-clients")
        parts = urlsplit(endpoint)
        self.address = (parts.hostname, parts.port or 80)
        self.count, self.interval_s = count, interval_s
        self.opened = 0
        self.ended: Counter = Counter()  # "408", "closed" (no answer), "error: ..." -> connections

    def _open(self, selector: selectors.BaseSelector, index: int) -> None:
        try:
            conn = socket.create_connection(self.address, timeout=10)
        except OSError as error:
            self.ended[f"not opened: {type(error).__name__}"] += 1
            return
        conn.setblocking(False)
        if index % 2:  # a GET whose header block never ends
            conn.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        else:  # a POST whose 1000-byte body comes a byte at a time
            conn.send(b"POST /v1/videos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{")
        selector.register(conn, selectors.EVENT_READ, index)
        self.opened += 1

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for index in range(self.count):
            self._open(selector, index)
        next_drip = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            for key, _ in selector.select(timeout=0.1):  # the server answered or closed
                self._ended(selector, key)
                self._open(selector, key.data)
            if time.monotonic() >= next_drip:
                for key in list(selector.get_map().values()):
                    try:
                        key.fileobj.send(b"X-Drip: 1\r\n" if key.data % 2 else b" ")
                    except OSError:
                        pass  # the read side reports it
                next_drip += self.interval_s
        for key in list(selector.get_map().values()):
            selector.unregister(key.fileobj)
            key.fileobj.close()
        selector.close()

    def _ended(self, selector: selectors.BaseSelector, key) -> None:
        conn = key.fileobj
        selector.unregister(conn)
        try:
            conn.setblocking(True)
            conn.settimeout(1)
            data = conn.recv(4096)
            status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"
        except OSError as error:
            status = f"error: {type(error).__name__}"
        conn.close()
        self.ended[status] += 1


class HealthProbe(_Background):
    """GET /healthz every PROBE_EVERY_S while it runs: latencies, 5xx answers, failures to answer."""

    def __init__(self, endpoint: str):
        super().__init__("healthz-probe")
        self.url = endpoint.rstrip("/") + "/healthz"
        self.latencies_s: list[float] = []
        self.server_errors = 0
        self.unreachable = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    response.read()
                self.latencies_s.append(time.perf_counter() - started)
            except urllib.error.HTTPError as error:
                self.latencies_s.append(time.perf_counter() - started)
                self.server_errors += error.code >= 500
            except (urllib.error.URLError, OSError):
                self.unreachable += 1
            self._stop.wait(PROBE_EVERY_S)
