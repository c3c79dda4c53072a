"""`pipedit bench load`: a bounded burst of create requests against a running server.

Each of C workers submits a request, then polls it until it ends; a 429 is counted as rejected
(not retried). Meanwhile GET /healthz is timed every 0.1 s, and `slow_connections` slow clients
(slow_clients.py) may be held open. The report: accepted / rejected / succeeded / failed /
cancelled counts, 5xx answers, submit->terminal latency percentiles of the accepted jobs, /healthz
latency percentiles and its 5xx, and how the server ended the slow clients; with slow clients
also header floods and the proxy's memory before and after them, and with `event_streams` the time
/healthz takes while that many event streams are open (floods.py). The run fails (exit 1)
when an accepted job did not reach a terminal state or any answer (/healthz too) was a 5xx."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

import numpy as np

from .floods import header_floods, streams_then_health
from .slow_clients import HealthProbe, SlowClients

TERMINAL = ("completed", "failed", "cancelled")
POLL_S = 0.2


@dataclass
class LoadReport:
    requests: int = 0
    accepted: int = 0
    rejected: int = 0  # 429
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    not_terminal: int = 0  # accepted, still unfinished when the wait ended
    server_errors: int = 0  # 5xx answers, to any call
    client_errors: int = 0  # other 4xx answers to the create call
    unreachable: int = 0
    latencies_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    healthz_latencies_s: list[float] = field(default_factory=list)
    healthz_server_errors: int = 0  # 5xx answers to /healthz
    healthz_unreachable: int = 0
    slow_connections: int = 0  # slow clients held open at once
    slow_opened: int = 0  # slow clients opened in all (one more each time the server ended one)
    slow_ended: dict = field(default_factory=dict)  # how the server ended them: status or "closed" -> count
    floods: dict | None = None  # header floods (with slow clients): floods.header_floods's answer
    streams: dict | None = None  # /healthz under open event streams: floods.streams_then_health's answer

    def percentile(self, q: float, values: list[float] | None = None) -> float | None:
        values = self.latencies_s if values is None else values
        return float(np.percentile(values, q)) if values else None

    @property
    def ok(self) -> bool:
        return (self.not_terminal == 0 and self.server_errors == 0 and self.unreachable == 0
                and self.healthz_server_errors == 0 and self.healthz_unreachable == 0)

    def summary(self) -> dict:
        figures = {k: v for k, v in asdict(self).items() if k not in ("latencies_s", "healthz_latencies_s")}
        figures.update({f"p{q}_s": self.percentile(q) for q in (50, 90, 99)})
        figures.update({f"healthz_p{q}_s": self.percentile(q, self.healthz_latencies_s) for q in (50, 99)})
        figures["healthz_probes"] = len(self.healthz_latencies_s)
        return figures

    def text(self) -> str:
        def seconds(q):
            value = self.percentile(q)
            return "n/a" if value is None else f"{value:.2f} s"

        lines = [
            f"requests {self.requests} in {self.wall_s:.1f} s: accepted {self.accepted}, rejected (429) "
            f"{self.rejected}, other 4xx {self.client_errors}, 5xx {self.server_errors}, unreachable {self.unreachable}",
            f"accepted jobs: succeeded {self.succeeded}, failed {self.failed}, cancelled {self.cancelled}, "
            f"not terminal {self.not_terminal}",
            f"latency submit->terminal: p50 {seconds(50)}, p90 {seconds(90)}, p99 {seconds(99)}",
            f"/healthz: {len(self.healthz_latencies_s)} probes, p50 {_ms(self.percentile(50, self.healthz_latencies_s))}, "
            f"p99 {_ms(self.percentile(99, self.healthz_latencies_s))}, 5xx {self.healthz_server_errors}, "
            f"unreachable {self.healthz_unreachable}",
            *([f"slow clients: {self.slow_connections} open at once, {self.slow_opened} opened in all; ended by "
               f"the server: {', '.join(f'{k} x{v}' for k, v in sorted(self.slow_ended.items())) or 'none'}"]
              if self.slow_connections else []),
            *_flood_lines(self.floods), *_stream_lines(self.streams),
            "every accepted job ended in a terminal state, no 5xx (/healthz neither)" if self.ok else
            "FAILED: some accepted jobs did not end, or the server answered 5xx / was unreachable",
        ]
        return "\n".join(lines)


def run_load(endpoint: str, requests: int, concurrency: int, duration: float | None = None, *,
             body: dict | None = None, api_key: str | None = None, timeout: float = 600.0,
             progress: bool = False, slow_connections: int = 0, slow_interval_s: float = 5.0,
             event_streams: int = 0) -> LoadReport:
    """Sends up to `requests` create calls, `concurrency` at a time, none after `duration` seconds;
    waits up to `timeout` seconds (from the start) for every accepted job to end. Meanwhile times
    /healthz, with `slow_connections` slow clients open (one byte or header line every
    `slow_interval_s`) and, with them, header floods; then, with `event_streams`, times /healthz
    while that many event streams follow one job."""
    base = endpoint.rstrip("/")
    body = body or {"prompt": "a load test: a red fox running through snow"}
    report, lock = LoadReport(), threading.Lock()
    started = time.monotonic()
    bar = _progress(requests, progress)

    def one(index: int) -> None:
        if duration is not None and time.monotonic() - started > duration:
            return
        outcome, latency, codes = _one_job(base, dict(body), api_key, started + timeout)
        with lock:
            report.requests += 1
            report.server_errors += sum(1 for code in codes if code >= 500)
            _count(report, outcome, latency)
            bar.update(1)

    slow = SlowClients(endpoint, slow_connections, slow_interval_s)
    with HealthProbe(endpoint) as probe:
        if slow_connections:
            slow.__enter__()
            time.sleep(min(1.0, slow_interval_s))  # all open before the burst
            report.floods = header_floods(base)
        try:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                list(pool.map(one, range(requests)))
        finally:
            if slow_connections:
                slow.__exit__()
    bar.close()
    report.wall_s = time.monotonic() - started
    if event_streams:
        report.streams = _streams_case(base, event_streams, dict(body), api_key)
    report.healthz_latencies_s = probe.latencies_s
    report.healthz_server_errors, report.healthz_unreachable = probe.server_errors, probe.unreachable
    report.slow_connections, report.slow_opened, report.slow_ended = slow_connections, slow.opened, dict(slow.ended)
    return report


def _flood_lines(floods: dict | None) -> list[str]:
    if floods is None:
        return []
    answers = ", ".join(f"{k} x{v}" for k, v in sorted(floods["answers"].items()))
    before, after = floods["rss_before"], floods["rss_after"]
    memory = (f"proxy memory (RSS) {before / 2**20:.0f} MB before, {after / 2**20:.0f} MB after"
              if before is not None and after is not None else floods["note"])
    return [f"header floods: answered {answers}; {memory}"]


def _stream_lines(streams: dict | None) -> list[str]:
    if streams is None:
        return []
    if "note" in streams:
        return [f"event streams: {streams['note']}"]
    took = ", ".join("n/a" if s is None else f"{s:.2f} s" for s in streams["healthz_s"])
    return [f"/healthz with {streams['opened']} event streams open: {took} (statuses {streams['statuses']})"]


def _streams_case(base: str, streams: int, body: dict, api_key: str | None) -> dict:
    code, reply = _call("POST", f"{base}/v1/videos", api_key, body)
    if code != 200:
        return {"note": f"not measured: the job to follow was refused ({code})"}
    return streams_then_health(base, reply["id"], streams, api_key)


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def _one_job(base: str, body: dict, api_key: str | None, deadline: float) -> tuple[str, float | None, list[int]]:
    """(outcome, latency, HTTP codes seen): outcome is rejected, client_error, unreachable,
    server_error, not_terminal or the job's terminal status."""
    codes: list[int] = []
    submitted = time.monotonic()
    code, reply = _call("POST", f"{base}/v1/videos", api_key, body)
    codes.append(code)
    if code == 429:
        return "rejected", None, codes
    if code != 200:
        return ("unreachable" if code == 0 else "server_error" if code >= 500 else "client_error"), None, codes
    video_id = reply["id"]
    while time.monotonic() < deadline:
        code, video = _call("GET", f"{base}/v1/videos/{video_id}", api_key)
        codes.append(code)
        if code == 200 and video["status"] in TERMINAL:
            return video["status"], time.monotonic() - submitted, codes
        time.sleep(POLL_S)
    return "not_terminal", None, codes


def _count(report: LoadReport, outcome: str, latency: float | None) -> None:
    counters = {"rejected": "rejected", "client_error": "client_errors", "unreachable": "unreachable",
                "completed": "succeeded", "failed": "failed", "cancelled": "cancelled",
                "not_terminal": "not_terminal"}
    if outcome in TERMINAL or outcome == "not_terminal":
        report.accepted += 1
    if outcome in counters:
        setattr(report, counters[outcome], getattr(report, counters[outcome]) + 1)
    if latency is not None:
        report.latencies_s.append(latency)


def _call(method: str, url: str, api_key: str | None, body: dict | None = None) -> tuple[int, dict | None]:
    """(HTTP status, JSON body); status 0 when the server could not be reached."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="requests ended", unit="req", disable=not enabled)


def is_loopback(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (socket.gaierror, ValueError):
        return False
