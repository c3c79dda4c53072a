"""The fault injection switch: its grammar, its selectors, `once`, and that it is off by default."""

import pytest
import torch

from pipedit import faults
from pipedit.errors import UserInputError


def test_the_grammar_reads_actions_and_selectors():
    parsed = faults.parse("kill:rank=1:step=2, hang:op=all_to_all:rank=0:step=1,oom:phase=decode:once,"
                          "fail:phase=denoise:aco:prompt=lighthouse")
    assert [f.action for f in parsed] == ["kill", "hang", "oom", "fail"]
    assert (parsed[0].rank, parsed[0].step) == (1, 2)
    assert (parsed[1].op, parsed[1].rank, parsed[1].step) == ("all_to_all", 0, 1)
    assert parsed[2].phase == "decode" and parsed[2].once
    assert parsed[3].aco and parsed[3].prompt == "lighthouse" and not parsed[3].once


@pytest.mark.parametrize("spec, says", [
    ("explode:rank=1", "unknown action 'explode'"),
    ("kill:rank=one", "rank must be an integer"),
    ("oom:phase=render", "phase must be one of encode, denoise, decode"),
    ("hang:op=reduce_scatter", "op must be one of all_to_all, all_gather, all_reduce, broadcast, p2p"),
    ("fail:colour=red", "unknown selector 'colour=red'"),
])
def test_parse_errors_say_what_is_wrong_and_what_is_allowed(spec, says):
    with pytest.raises(UserInputError, match=says):
        faults.parse(spec)


def test_every_fault_point_in_the_code_can_be_selected():
    """An op checked in the code but missing from the grammar could never fire (the step cache's
    all_reduce and the split decode's broadcast once were): every `faults.check(op=...)` parses."""
    import re
    from pathlib import Path

    source = Path(faults.__file__).parent
    posted = {op for path in source.rglob("*.py")
              for op in re.findall(r'faults\.check\(op="(\w+)"\)', path.read_text())}
    assert {"all_reduce", "broadcast", "all_to_all", "p2p"} <= posted
    for op in posted:
        assert faults.parse(f"hang:op={op}")[0].op == op


def test_faults_fire_only_where_every_selector_matches(monkeypatch):
    monkeypatch.setenv(faults.ENV, "fail:phase=denoise:step=1:aco:prompt=fox,oom:phase=decode")
    monkeypatch.delenv(faults.ONCE_DIR_ENV, raising=False)
    points = faults.FaultPoints.from_environment(0)
    points.enter(phase="denoise", step=1, aco=False, prompt="a red fox")
    points.check()  # not an Aco step
    points.enter(phase="denoise", step=0, aco=True, prompt="a red fox")
    points.check()  # another step
    points.enter(phase="denoise", step=1, aco=True, prompt="a cat")
    points.check()  # another prompt
    points.enter(phase="denoise", step=1, aco=True, prompt="a red fox")
    with pytest.raises(faults.InjectedFault, match="injected fail fault on rank 0 \\(denoise, step 1"):
        points.check()
    points.enter(phase="decode", prompt="anything")
    points.check(op="p2p")  # a fault without op does not fire where an operation is posted
    with pytest.raises(torch.OutOfMemoryError, match="injected oom fault"):
        points.check()


def test_once_fires_a_single_time_across_processes_sharing_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(faults.ENV, "fail:phase=encode:once")
    monkeypatch.setenv(faults.ONCE_DIR_ENV, str(tmp_path))
    points = faults.FaultPoints.from_environment(0)
    points.enter(phase="encode", prompt="p")
    with pytest.raises(faults.InjectedFault):
        points.check()
    rebuilt = faults.FaultPoints.from_environment(0)
    rebuilt.enter(phase="encode", prompt="p")
    rebuilt.check()  # the marker exists: a retry (even on a rebuilt rank) succeeds
    assert len(list(tmp_path.glob("fault-*"))) == 1


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    points = faults.FaultPoints.from_environment(0)
    points.enter(phase="decode", prompt="p")
    points.check()


def test_the_switch_travels_from_the_server_environment_to_replicas_and_ranks(monkeypatch):
    from pipedit.config import EngineConfig, ParallelConfig
    from pipedit.runtime.executor import fault_env
    from pipedit.serve.ray_app.deployment import deployment_options

    config = EngineConfig(parallel=ParallelConfig(ulysses=2))
    monkeypatch.delenv(faults.ENV, raising=False)
    assert fault_env() == {} and "runtime_env" not in deployment_options(config)["ray_actor_options"]
    monkeypatch.setenv(faults.ENV, "kill:rank=1:step=2")
    ranks_env = fault_env()
    assert ranks_env[faults.ENV] == "kill:rank=1:step=2" and ranks_env[faults.ONCE_DIR_ENV]
    replica = deployment_options(config)["ray_actor_options"]["runtime_env"]["env_vars"]
    assert replica == {faults.ENV: "kill:rank=1:step=2"}
    monkeypatch.setenv(faults.ENV, "kill:rank=x")
    with pytest.raises(UserInputError, match="rank must be an integer"):
        fault_env()  # a typo fails the engine's start
