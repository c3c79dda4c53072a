import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "preforked"))

# Ray and tokenizers read these at import time; tests never reach a hub.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The compile tests' graphs (in this process, its spawned ranks and the next runs) come from
# inductor's on-disk FX graph cache after their first build (torch's default; kept on if unset).
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
# One torch (OpenMP) thread per test process, as every Ray rank has: the suite keeps both cores busy
# with its xdist workers and the rank processes, and a second thread per process only spins (the
# suite took 833 s with two threads and 626 s with one, both under a /proc sampler).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray's log monitor looks for new worker log files every 0.5 s instead of every 0.1 s once a
# session has started many workers (half its CPU on an idle session with about 120 log files).
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")


def pytest_configure(config):
    """Ray workers start as forked copies of a preloaded interpreter (tests/preforked), one
    server per process that runs tests (not xdist's controller)."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", default=None):
        import preforked_workers

        preforked_workers.start()


@pytest.fixture(scope="session")
def demo_checkpoint(tmp_path_factory):
    """The tiny demo HunyuanVideo checkpoint, written once per test session."""
    from pipedit.integrations.hunyuan_video.demo_checkpoint import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("models") / "hunyuan-demo")


@pytest.fixture(scope="session")
def osp_demo(tmp_path_factory):
    """The tiny OpenSoraPlan demo checkpoint (official layout), written once per session by
    `pipedit demo-checkpoint --model opensora-plan DIR`."""
    from pipedit.cli import main

    folder = tmp_path_factory.mktemp("models") / "osp-demo"
    assert main(["demo-checkpoint", "--model", "opensora-plan", str(folder)]) == 0
    return folder


@pytest.fixture(scope="session")
def diffusers_pipeline(demo_checkpoint):
    """The reference implementation, loaded unchanged from the same folder."""
    from diffusers import HunyuanVideoPipeline
    from reference_cache import cached

    pipe = HunyuanVideoPipeline.from_pretrained(demo_checkpoint)
    pipe.set_progress_bar_config(disable=True)
    return cached(pipe, demo_checkpoint)  # reference outputs kept on disk: tests/reference_cache.py


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (starting Ray costs seconds)."""
    import ray

    from session_ray import connect_session_ray

    connect_session_ray()
    yield ray
    ray.shutdown()  # this process's session; the instance too when it is ours


@pytest.fixture(scope="session", autouse=True)
def reused_rank_processes():
    """An engine's Ray rank processes go on to later engines' ranks of their kind
    (pipedit.runtime.kept_ranks: a rank process's start costs seconds of imports, which made half
    the suite's CPU time). Processes kept idle hold up to KEEP_AT_MOST_RANKS of the session Ray's
    logical CPUs (ray_session has room for them beside any test's own)."""
    from pipedit.runtime.kept_ranks import reuse_rank_processes

    with reuse_rank_processes():
        yield


@pytest.fixture(scope="session")
def engines():
    """Engines shared by the session's tests that only send requests, one per configuration
    (tests/engine_pool.py says which tests may use them: `engines.get(config)`)."""
    from engine_pool import EnginePool

    pool = EnginePool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def wan_three_heads(tmp_path_factory):
    """The tiny three-head Wan2.1 text-to-video checkpoint the adapter and parallel tests share
    (3 heads: 2 ranks split them 2+1)."""
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "three-heads",
                                 WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=3))


@pytest.fixture(scope="session")
def wan_three_heads_adapters(wan_three_heads, tmp_path_factory):
    """Two LoRA adapters of wan_three_heads, one in each form Wan's loader takes (tests/lora_files.py)."""
    from lora_files import write_wan_adapters

    return write_wan_adapters(wan_three_heads, tmp_path_factory.mktemp("loras"))


# Under pytest-xdist (`make test`: -n 3 --dist loadgroup --no-loadscope-reorder), each module's tests
# run on one worker, so its module-scoped engines and services start once; the cluster folder's
# tests, which share one Ray cluster of three nodes, run on one worker too. Each worker has its own
# session Ray. The modules with a `slow` test are handed out first, so that none of them starts
# last and ends the run alone.
def _scope(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return "tests/cluster" if path.startswith("tests/cluster/") else path


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown when pytest runs without the plugin
def pytest_xdist_make_scheduler(config, log):
    """The scheduler handing out whole modules (`_scope`). xdist's loadgroup reads the groups from
    a suffix its workers add to each test's node id, which pytest 9.2 no longer lets a plugin set
    (a node id is built from the item's own path): every test would be handed out alone."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: collection order unchanged
        return
    slow = {_scope(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _scope(item.nodeid) not in slow)  # stable: same order on every worker
