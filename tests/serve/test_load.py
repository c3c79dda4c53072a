"""`pipedit bench load`: 30 requests at concurrency 10 against a queue limit of 5 on the demo
model: some are refused with 429, every accepted job ends, and no answer is a 5xx."""

import json

import pytest

from pipedit.cli import main
from pipedit.serve.contract.params import ServiceLimits
from serve_helpers import start


@pytest.mark.slow
def test_burst_against_a_queue_limit_of_five(demo_checkpoint, tmp_path, capsys):
    running = start(demo_checkpoint, tmp_path, ServiceLimits(max_queued=5))
    try:
        code = main(["bench", "load", "--endpoint", running.url, "--requests", "30", "--concurrency", "10",
                     "--steps", "1", "--size", "32x32", "--json", "--timeout", "300"])
        figures = json.loads(capsys.readouterr().out)
        print("bench load figures:", figures)
        assert code == 0
        assert figures["requests"] == 30 and figures["accepted"] + figures["rejected"] == 30
        assert figures["rejected"] > 0 and figures["accepted"] >= 5
        assert figures["succeeded"] == figures["accepted"] and figures["not_terminal"] == 0
        assert figures["server_errors"] == 0 and figures["client_errors"] == 0
        assert figures["p50_s"] <= figures["p90_s"] <= figures["p99_s"]
        rows, _ = running.service.store.list(limit=100)
        assert len(rows) == figures["accepted"] and {r.status for r in rows} == {"completed"}
    finally:
        running.close()


def test_load_refuses_a_remote_endpoint_and_bad_counts(capsys):
    assert main(["bench", "load", "--endpoint", "http://192.0.2.1:8000", "--requests", "1"]) == 2
    assert "not on loopback" in capsys.readouterr().err
    assert main(["bench", "load", "--endpoint", "http://127.0.0.1:1", "--concurrency", "0"]) == 2
    assert "--concurrency must be at least 1" in capsys.readouterr().err


@pytest.fixture
def idle_server(request, tmp_path):
    """An idle engine's server. Its body time limit is 30 s unless a test asks for less
    (`indirect` parametrisation): on a busy machine a plain POST's body can take longer than the
    0.5 s that the slow-connection tests need, and a 408 would count as a client error."""
    from pipedit.config import GenerationDefaults
    from pipedit.serve.http.app import build_app
    from pipedit.serve.jobs.service import JobService
    from pipedit.serve.jobs.store import JobStore
    from serve_helpers import IdleEngine, serve_in_thread

    limits = ServiceLimits(max_queued=100, body_timeout_s=getattr(request, "param", 30.0))
    service = JobService(IdleEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo",
                         GenerationDefaults(64, 64, 5, 2), limits)
    url, stop = serve_in_thread(build_app(service))
    yield url, service
    stop()
    service.close()
    service.store.close()


def test_load_fails_when_accepted_jobs_never_end_and_honours_duration(idle_server, capsys):
    url, _ = idle_server
    code = main(["bench", "load", "--endpoint", url, "--requests", "4", "--concurrency", "4", "--timeout", "1",
                 "--json"])
    figures = json.loads(capsys.readouterr().out)
    assert code == 1 and figures["accepted"] == figures["not_terminal"] == 4 and figures["p50_s"] is None
    from pipedit.bench.load import run_load

    # Both workers wait out the 1.5 s for their first job; by then the 0.5 s for sending are over.
    report = run_load(url, requests=50, concurrency=2, duration=0.5, timeout=1.5)
    assert report.requests == report.not_terminal == 2 and not report.ok


def test_load_counts_5xx_answers(idle_server):
    from pipedit.bench.load import run_load

    url, service = idle_server

    def crash(*_args):
        raise RuntimeError("boom")

    service.create = crash
    report = run_load(url, requests=3, concurrency=3, timeout=5)
    assert report.server_errors == 3 and report.accepted == 0 and not report.ok
    assert "5xx 3" in report.text() and "FAILED" in report.text()


@pytest.mark.parametrize("idle_server", [0.5], indirect=True, ids=["body-limit-0.5s"])
def test_slow_connections_are_held_open_and_healthz_is_timed(idle_server, capsys):
    # `--slow-connections`: half trickle a POST body, half a GET's headers, one byte or line every
    # --slow-interval; the server's body time limit (here 0.5 s) ends the POSTs with 408 and each is
    # replaced, so as many stay open; /healthz is timed all along.
    url, _ = idle_server
    code = main(["bench", "load", "--endpoint", url, "--requests", "2", "--concurrency", "2", "--timeout", "2",
                 "--slow-connections", "20", "--slow-interval", "0.2", "--json"])
    figures = json.loads(capsys.readouterr().out)
    assert code == 1  # the idle engine ends no job
    assert figures["slow_connections"] == 20 and figures["slow_opened"] > 20
    assert set(figures["slow_ended"]) == {"408"}  # the POSTs' bodies; the GETs' headers stay open
    assert figures["healthz_probes"] > 5 and figures["healthz_server_errors"] == figures["healthz_unreachable"] == 0
    assert 0 < figures["healthz_p50_s"] <= figures["healthz_p99_s"]
    assert main(["bench", "load", "--endpoint", url, "--slow-connections", "-1"]) == 2


@pytest.mark.parametrize("idle_server", [0.5], indirect=True, ids=["body-limit-0.5s"])
def test_slow_connections_bring_header_floods_and_event_streams_time_healthz(idle_server, capsys):
    # With --slow-connections the run also floods headers (the review's 4,000 lines of 65,000 bytes,
    # 3 rounds of 2): each is answered 431 (serve.max_header_bytes), and the Serve proxy's memory
    # is reported, or why it cannot be (this server is not Ray Serve). --event-streams N opens N
    # streams on one job, then times /healthz.
    url, _ = idle_server
    code = main(["bench", "load", "--endpoint", url, "--requests", "1", "--concurrency", "1", "--timeout", "1",
                 "--slow-connections", "2", "--slow-interval", "0.2", "--event-streams", "20"])
    out = capsys.readouterr().out
    assert code == 1, out  # the idle engine ends no job
    assert "header floods: answered 431 x6; " in out and "proxy" in out, out
    assert "/healthz with 20 event streams open: " in out and "statuses [200, 200, 200, 200, 200]" in out, out
    assert main(["bench", "load", "--endpoint", url, "--event-streams", "-1"]) == 2
