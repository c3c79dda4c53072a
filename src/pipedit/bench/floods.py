"""Two hostile cases of `pipedit bench load`, against a server on this machine:

- header floods (with --slow-connections): `rounds` rounds of `parallel` connections, each sending
  up to `lines` header lines of `line_bytes` bytes (the review's: 4,000 of 65,000, 256 MB), and how
  the server answered each; plus the resident memory of Serve's HTTP proxy (the process Ray names
  `ray::ProxyActor`) before and after, which should stay flat;
- open event streams (--event-streams N): N raw GET /v1/videos/{id}/events on one job, then
  /healthz timed while they are open (a load balancer's liveness probe must not queue behind them).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

PROXY_TITLE = "ray::ProxyActor"  # the process title Ray gives the proxy actor's worker
STREAMS_SETTLE_S = 3.0  # /healthz is asked this long after the streams were opened (as in the review)


def proxy_rss() -> tuple[int | None, str]:
    """(the summed resident memory in bytes of the Serve proxies on this machine, None when none is
    found or psutil is missing; what was measured or why not)."""
    try:
        import psutil
    except ImportError:
        return None, "proxy memory: unavailable (psutil is not installed)"
    total, found = 0, 0
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = process.info["cmdline"] or []
            if cmdline and cmdline[0].startswith(PROXY_TITLE):
                total += process.memory_info().rss
                found += 1
        except psutil.Error:
            continue
    if not found:
        return None, (f"proxy memory: unavailable (no {PROXY_TITLE} process visible on this machine: the server "
                      f"is not Ray Serve, or it runs as another user or elsewhere)")
    return total, f"{found} proxy process(es)"


def flood_once(endpoint: str, lines: int, line_bytes: int, timeout: float = 30.0) -> str:
    """One connection sending a GET /healthz with `lines` header lines of `line_bytes` bytes, as
    long as the server reads; returns the status it answered ("431", ...) or "closed"."""
    parts = urlsplit(endpoint)
    line = b"X-Flood: " + b"a" * max(0, line_bytes - 11) + b"\r\n"
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout) as conn:
            try:
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                for _ in range(lines):
                    conn.sendall(line)
                conn.sendall(b"\r\n")
            except OSError:
                pass  # the server answered and stopped reading
            answer = conn.recv(64)
    except OSError:
        return "closed"
    fields = answer.split(b" ", 2)
    return fields[1].decode("ascii", "replace") if len(fields) > 1 else "closed"


def header_floods(endpoint: str, rounds: int = 3, parallel: int = 2, lines: int = 4000,
                  line_bytes: int = 65000) -> dict:
    """The floods, `parallel` at a time; returns {answers: {status: count}, rss_before, rss_after, note}."""
    before, note = proxy_rss()
    answers: Counter = Counter()
    lock = threading.Lock()

    def one():
        status = flood_once(endpoint, lines, line_bytes)
        with lock:
            answers[status] += 1

    for _ in range(rounds):
        threads = [threading.Thread(target=one, daemon=True) for _ in range(parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    time.sleep(1.0)  # what the proxy frees, it frees now
    after, note_after = proxy_rss()
    return {"answers": dict(answers), "rss_before": before, "rss_after": after,
            "note": note if before is None else note_after}


def streams_then_health(endpoint: str, video_id: str, streams: int, api_key: str | None = None,
                        probes: int = 5) -> dict:
    """Opens `streams` event streams on `video_id`, waits STREAMS_SETTLE_S, then times `probes`
    /healthz calls (a new connection each); returns {opened, healthz_s: [...], statuses: [...]}."""
    import urllib.error
    import urllib.request

    parts = urlsplit(endpoint)
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    request = (f"GET /v1/videos/{video_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
               f"Accept: text/event-stream\r\n\r\n").encode()
    opened = []
    try:
        for _ in range(streams):
            try:
                conn = socket.create_connection((parts.hostname, parts.port or 80), timeout=10)
                conn.sendall(request)
                opened.append(conn)
            except OSError:
                break
        time.sleep(STREAMS_SETTLE_S)
        latencies, statuses = [], []
        for _ in range(probes):
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(f"{endpoint.rstrip('/')}/healthz", timeout=30) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as error:
                statuses.append(error.code)
            except OSError:
                statuses.append(None)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.2)
    finally:
        for conn in opened:
            conn.close()
    return {"opened": len(opened), "healthz_s": latencies, "statuses": statuses}
