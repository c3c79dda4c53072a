"""Which Ray a command runs on: the cluster --address / RAY_ADDRESS names, else an instance of its
own started with address="local" (never one a killed head left in Ray's temp folder), bound to
loopback. The arguments are checked without Ray; one subprocess starts a real instance next to a
stale `ray_current_cluster` file, joins two gloo ranks in it and lists the sockets they all listen on."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from pipedit.runtime import ray_instance


@pytest.fixture
def fake_init(monkeypatch):
    """ray.init replaced: records its arguments and whether Ray's cluster switch was off meanwhile."""
    import ray
    from ray._private import ray_constants

    calls = []
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append((kw, ray_constants.ENABLE_RAY_CLUSTER)))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def test_an_address_attaches_and_none_starts_an_instance_of_its_own(fake_init, monkeypatch):
    from ray._private import ray_constants

    switch = ray_constants.ENABLE_RAY_CLUSTER
    assert ray_instance.connect_ray(num_cpus=3) is True
    (own, switch_meanwhile), = fake_init
    assert own["address"] == "local" and own["num_cpus"] == 3 and switch_meanwhile is False
    assert ray_constants.ENABLE_RAY_CLUSTER == switch  # restored once started
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_instance.connect_ray(num_cpus=3) is False
    assert fake_init[-1][0]["address"] == "10.0.0.1:6379" and "num_cpus" not in fake_init[-1][0]
    assert ray_instance.connect_ray("10.0.0.2:6379", num_cpus=3) is False  # --address beats RAY_ADDRESS
    assert fake_init[-1][0]["address"] == "10.0.0.2:6379"
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert ray_instance.connect_ray(num_cpus=3) is True and fake_init[-1][0]["address"] == "local"


TIMED_OUT = ("The current node timed out during startup. This could happen because some of the raylet failed to "
             "startup or the GCS has become overloaded.")  # what ray.init raises (ray/_private/node.py)


@pytest.mark.parametrize("later", ["comes-up", "times-out-again"])
def test_an_own_instance_that_times_out_is_started_once_more_without_the_first_ones_processes(monkeypatch, capsys,
                                                                                               later):
    """Ray's 30 s raylet wait ran out (a busy machine): what that ray.init started is killed, and a
    second ray.init is made; a second time-out is raised as it is, its processes killed too."""
    import ray

    started = []

    def init(**_options):
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
        if len(started) == 1 or later == "times-out-again":
            raise Exception(TIMED_OUT)

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        if later == "comes-up":
            assert ray_instance.connect_ray(num_cpus=2) is True
        else:
            with pytest.raises(Exception, match="timed out during startup"):
                ray_instance.connect_ray(num_cpus=2)
        assert len(started) == 2
        assert started[0].poll() is not None, "the first try's process was left running"
        # The second try's: Ray's instance when it came up, else killed as the first.
        assert (started[1].poll() is None) == (later == "comes-up")
        assert "starting it once more" in capsys.readouterr().err
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_other_errors_of_an_own_start_are_not_retried(monkeypatch):
    import ray

    calls = []

    def init(**_options):
        calls.append(1)
        raise ValueError("num_cpus must be positive")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ValueError, match="num_cpus"):
        ray_instance.connect_ray(num_cpus=2)
    assert calls == [1]


def test_the_address_flag_reaches_every_command_that_starts_ray(monkeypatch):
    from pipedit.cli import build_parser

    parser = build_parser()
    for argv in (["generate", "--prompt", "p", "--output", "o.mp4"], ["render", "p.txt", "--out-dir", "d"],
                 ["bench", "latency"], ["bench", "handoff"], ["check-node"], ["serve"]):
        assert parser.parse_args(argv + ["--address", "10.0.0.1:6379"]).address == "10.0.0.1:6379", argv


_STALE = """
import json, os, psutil, ray, torch
from pipedit.config import EngineConfig
from pipedit.runtime.executor import rank_env
from pipedit.runtime.layout import WorldLayout
from pipedit.runtime.rank import RankWorker
from pipedit.runtime.ray_instance import ensure_ray, stop_ray

class Rank(RankWorker):
    def join(self, rendezvous):  # the engine's process-group start, then one collective
        import torch.distributed as dist
        self._init_process_group(rendezvous)
        dist.all_reduce(torch.ones(1))
        return os.getpid()

def listening_on(processes):
    found = set()
    for process in processes:
        try:
            found |= {c.laddr.ip for c in process.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            pass
    return found

try:
    ray.init(num_cpus=2)  # what generate did: Ray finds the stale file and refuses
    refused = None
except Exception as error:
    refused = str(error)
owned = ensure_ray(2)
try:
    node = ray.get(ray.remote(lambda: ray.util.get_node_ip_address()).remote())
    listening = listening_on([psutil.Process()] + psutil.Process().children(recursive=True))
    # Two gloo ranks started as the executor starts them (its actors' environment), joined.
    layout = WorldLayout(ulysses=2)
    actor = ray.remote(num_cpus=1)(Rank).options(runtime_env={"env_vars": rank_env({}, layout.ranks_per_node)})
    ranks = [actor.remote(EngineConfig(), layout, rank, {}) for rank in range(2)]
    rendezvous = ray.get(ranks[0].rendezvous_address.remote())
    pids = ray.get([rank.join.remote(rendezvous) for rank in ranks], timeout=120)
    ranks_listening = listening_on([psutil.Process(pid) for pid in pids])
    ray.get([rank.close.remote() for rank in ranks], timeout=60)
finally:
    stop_ray(owned)
print(json.dumps({"refused": refused, "owned": owned, "node": node, "listening": sorted(listening),
                  "ranks_listening": sorted(ranks_listening)}))
"""

@pytest.mark.slow
def test_a_stale_cluster_file_is_ignored_and_the_own_instance_listens_on_loopback_only():
    """Ray's own processes and two gloo ranks joined as the executor starts them (their process
    group's sockets included) listen on loopback only. On every torch: gloo on the CPU."""
    # A short folder: Ray's socket paths inside it must stay under the OS's 107 characters.
    temp = tempfile.mkdtemp(prefix="rt")
    try:
        os.makedirs(os.path.join(temp, "ray"))
        with open(os.path.join(temp, "ray", "ray_current_cluster"), "w") as stale:
            stale.write("127.0.0.1:9")  # a head that was killed: nothing listens there
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        done = subprocess.run([sys.executable, "-c", _STALE], env={**env, "RAY_TMPDIR": temp}, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert "num_cpus" in (seen["refused"] or ""), seen  # the file is where Ray looks for a cluster
        assert seen["owned"] is True and seen["node"] == "127.0.0.1", seen
        loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
        assert seen["listening"] and set(seen["listening"]) <= loopback, seen
        assert seen["ranks_listening"] and set(seen["ranks_listening"]) <= loopback, seen
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_pipedit_never_turns_rays_token_authentication_off():
    """Only tests turn it off, in their own environment (tests/conftest.py)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sources = [*(root / "src").rglob("*.py"), *(root / "serve").rglob("*.py"), *(root / "integrations").rglob("*.py"),
               root / "Makefile", *(root / "configs").glob("*")]
    setting = [str(path.relative_to(root)) for path in sources if path.is_file() and "RAY_AUTH_MODE" in path.read_text()]
    assert setting == []
