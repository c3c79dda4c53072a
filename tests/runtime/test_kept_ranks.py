"""Rank processes kept from one engine to the next (pipedit.runtime.kept_ranks). The suite runs
inside one scope (conftest), so the engines here take and leave processes as every test's do: a
later engine, on another model, takes its ranks' processes from two earlier groups, and one that
needs more than is kept takes what is kept and starts the rest, each with its model's
single-device latents (1e-4 of their largest, the contract's bound for final latents:
Ulysses only moves data); a group that saw a failure is not kept; a group with injected faults
takes kept processes, its faults fire, and it is not kept either. The scope's rules (which
processes a group takes, the bound, nothing kept while memory is short, a placement group's end
with its last process, a scope's end, nothing kept outside one, another Ray session's processes)
run on stand-ins."""

import os

import pytest

from e2e_helpers import Case, single_device_latents
from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import RequestFailure, VideoRequest
from pipedit.runtime import kept_ranks
from pipedit.runtime.engine import Engine
from pipedit.runtime.rank_failure import RankGroupError

CASE = Case("a paper boat on a canal", height=48, width=80, frames=9, steps=2, seed=4)


@pytest.fixture(autouse=True)
def ample_memory(monkeypatch):
    """What is kept here must not depend on what else runs on the machine (another suite beside
    this one leaves it short of memory, and then nothing is kept): its memory is ample here, but
    for the test that sets it."""
    monkeypatch.setattr(kept_ranks, "_available_share", lambda: 1.0)


def _config(checkpoint, **parallel) -> EngineConfig:
    return EngineConfig(model=ModelConfig(path=str(checkpoint)), parallel=ParallelConfig(**parallel))


def _pids(engine) -> list[int]:
    import ray

    return ray.get([actor.__ray_call__.remote(lambda _: os.getpid()) for actor in engine.executor.actors])


def _kept_actors() -> list:
    return [kept.actor for kept in kept_ranks._kept]


def _request(steps: int = CASE.steps) -> VideoRequest:
    return VideoRequest(CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames, steps=steps,
                        seed=CASE.seed)


@pytest.mark.slow  # rank groups on Ray
def test_a_later_engine_takes_its_ranks_processes_from_two_earlier_groups(ray_session, demo_checkpoint,
                                                                         wan_three_heads):
    with Engine(_config(demo_checkpoint, ulysses=2)) as first:  # two denoise ranks
        first_pids = _pids(first)
        first.generate(_request(steps=1))
    with Engine(_config(demo_checkpoint, decode_ranks=1)) as second:  # a denoise rank and a decode rank
        second_pids = _pids(second)
        second.generate(_request(steps=1))
    # Another family, two denoise ranks and a decode rank: nothing of the earlier models may remain.
    with Engine(_config(wan_three_heads, ulysses=2, decode_ranks=1)) as third:
        third_pids = _pids(third)
        latents = third.generate(_request()).latents
    assert set(third_pids) <= set(first_pids) | set(second_pids), (first_pids, second_pids, third_pids)
    assert set(third_pids) & set(first_pids) and set(third_pids) & set(second_pids)
    assert third_pids[2] == second_pids[1]  # the decode rank's process: the only decode process kept
    reference = single_device_latents(wan_three_heads, CASE)
    assert (latents - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()


@pytest.fixture
def kept_apart(monkeypatch):
    """The processes kept by earlier tests set aside (kept again afterwards, for later tests), so
    that this test's groups find only their own; what they leave is ended."""
    monkeypatch.setattr(kept_ranks, "_kept", [])
    yield
    kept_ranks.end_kept()


@pytest.mark.slow
def test_a_group_takes_the_kept_processes_and_starts_only_the_ranks_left(ray_session, demo_checkpoint, kept_apart):
    with Engine(_config(demo_checkpoint, ulysses=2)) as first:
        first_pids = _pids(first)
    with Engine(_config(demo_checkpoint, ulysses=2, decode_ranks=1)) as second:
        second_pids = _pids(second)
        latents = second.generate(_request()).latents
    assert sorted(second_pids[:2]) == sorted(first_pids) and second_pids[2] not in first_pids
    reference = single_device_latents(demo_checkpoint, CASE)
    assert (latents - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()


@pytest.mark.slow
def test_a_group_that_saw_a_failure_is_not_kept(ray_session, demo_checkpoint):
    with Engine(_config(demo_checkpoint, ulysses=2)) as engine:
        actors = list(engine.executor.actors)
        with pytest.raises(RankGroupError):
            engine.executor.call_rank(1, "aco_shape", None)  # fails in the rank: no job, no request
    assert not set(map(id, actors)) & set(map(id, _kept_actors()))


@pytest.mark.slow
def test_a_group_with_injected_faults_takes_kept_processes_and_its_faults_fire(ray_session, demo_checkpoint,
                                                                            monkeypatch):
    with Engine(_config(demo_checkpoint, ulysses=2)) as first:
        first_pids = _pids(first)
    monkeypatch.setenv("PIPEDIT_FAULTS", "fail:phase=denoise:prompt=lighthouse")  # read by the engine's start
    with Engine(_config(demo_checkpoint, ulysses=2)) as faulty:
        assert sorted(_pids(faulty)) == sorted(first_pids)  # started without the switch: the rebind hands it over
        requests = [VideoRequest(prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames, steps=1)
                    for prompt in ("a lighthouse at dusk", "a paper boat")]
        outcomes = {o.request_id: o for o in faulty.generate_many(requests)}
        actors = list(faulty.executor.actors)
    failed, done = outcomes[requests[0].request_id], outcomes[requests[1].request_id]
    assert isinstance(failed, RequestFailure) and "injected" in failed.message, failed
    assert not isinstance(done, RequestFailure)
    assert not set(map(id, actors)) & set(map(id, _kept_actors()))  # a group with faults is never kept


@pytest.fixture
def stand_ins(monkeypatch):
    """No scope open and nothing kept (the session's scope set aside), on a Ray cluster of one node;
    what is ended is recorded: (actors killed, placement groups removed)."""
    ended = []
    monkeypatch.setattr(kept_ranks, "_open_scopes", 0)
    monkeypatch.setattr(kept_ranks, "_kept", [])
    monkeypatch.setattr(kept_ranks, "_one_node", lambda: True)
    def end(actors, groups):
        if actors or groups:
            ended.append((actors, groups))

    monkeypatch.setattr(kept_ranks, "_end", end)
    return ended


def _killed(ended) -> list:
    return [actor for actors, _ in ended for actor in actors]


def _removed(ended) -> list:
    return [group for _, groups in ended for group in groups]


def _group(name: str, kinds: str = "ee", node: str = "n1", env: str = "env") -> list[kept_ranks.KeptRank]:
    """Stand-ins for a group's processes: kinds 'e' (denoise) or 'd' (decode), named name0, name1...
    Their key: (environment, Ray session)."""
    placement = kept_ranks.Placement(name, (len(kinds), 0), len(kinds))
    placement._node = node  # not asked of Ray
    return [kept_ranks.KeptRank((env, "s"), kind, f"{name}{rank}", placement) for rank, kind in enumerate(kinds)]


def _actors(taken) -> list:
    return [None if kept is None else kept.actor for kept in taken]


def test_on_several_nodes_a_group_takes_its_kinds_from_several_groups_on_one_node_or_nothing(stand_ins,
                                                                                            monkeypatch):
    monkeypatch.setattr(kept_ranks, "_one_node", lambda: False)
    with kept_ranks.reuse_rank_processes():
        kept_ranks.keep(_group("a", "ee"))
        kept_ranks.keep(_group("b", "d", node="n2"))
        kept_ranks.keep(_group("x", "d", env="another env"))
        assert _actors(kept_ranks.take(("env", "s"), "eed")) == [None] * 3  # the decode ones: another node or env
        kept_ranks.keep(_group("c", "d"))
        assert _actors(kept_ranks.take(("env", "s"), "ede")) == ["a1", "c0", "a0"]  # the latest kept first
        assert _actors(kept_ranks.take(("env", "s"), "e")) == [None]
        assert _actors(kept_ranks.take(("env", "s"), "d")) == ["b0"]
        assert _actors(kept_ranks._kept) == ["x0"] and stand_ins == []


def test_on_one_node_a_group_takes_what_is_kept_and_leaves_the_rest_to_start(stand_ins):
    with kept_ranks.reuse_rank_processes():
        kept_ranks.keep(_group("p", "e"))
        kept_ranks.keep(_group("q", "ed"))
        assert _actors(kept_ranks.take(("env", "s"), "eee")) == ["q0", "p0", None]  # the latest kept first
        assert _actors(kept_ranks.take(("env", "s"), "dd")) == ["q1", None]
        assert kept_ranks._kept == [] and stand_ins == []


def test_the_longest_unused_go_first_beyond_the_bound_and_a_placement_group_goes_with_its_last(stand_ins):
    with kept_ranks.reuse_rank_processes():
        for name in ("a", "b", "c"):  # two processes each: 6 > KEEP_AT_MOST_RANKS (5)
            kept_ranks.keep(_group(name))
        assert _killed(stand_ins) == ["a0"] and _removed(stand_ins) == []  # a1 still holds a's placement
        assert _actors(kept_ranks.take(("env", "s"), "e")) == ["c1"]
        kept_ranks.keep(_group("d", "e"))
        assert _actors(kept_ranks.take(("env", "another session"), "e")) == [None]  # a new Ray session
        assert _killed(stand_ins) == ["a0", "a1", "b0", "b1", "c0", "d0"]  # the old one's are forgotten
        assert _removed(stand_ins) == ["a", "b", "d"]  # c1 runs in a group: c's placement stays
    taken = _group("e", "ed")
    kept_ranks.end_ranks([taken[0].actor], [taken[0].placement, taken[1].placement])  # one never started
    assert _removed(stand_ins)[-1] == "e"


def test_nothing_is_kept_while_the_machine_is_short_of_memory(stand_ins, monkeypatch):
    """Idle processes yield to the machine's other work: below KEEP_WHILE_AVAILABLE of its memory
    available, a group kept or one that starts ends every kept process (one that starts still takes
    what it can use: that costs no memory)."""
    share = [0.5]
    monkeypatch.setattr(kept_ranks, "_available_share", lambda: share[0])
    with kept_ranks.reuse_rank_processes():
        kept_ranks.keep(_group("a"))
        kept_ranks.keep(_group("b", "ed"))
        assert stand_ins == []
        share[0] = kept_ranks.KEEP_WHILE_AVAILABLE - 0.01
        assert _actors(kept_ranks.take(("env", "s"), "e")) == ["b0"]
        assert _killed(stand_ins) == ["a0", "a1", "b1"] and _removed(stand_ins) == ["a"]  # b0 runs in a group
        share[0] = 0.5
        kept_ranks.keep(_group("c"))
        share[0] = 0.1
        kept_ranks.keep(_group("d", "d"))
        assert _killed(stand_ins)[3:] == ["c0", "c1", "d0"] and _removed(stand_ins)[1:] == ["c", "d"]
        assert kept_ranks._kept == []
    monkeypatch.undo()
    assert 0 < kept_ranks._available_share() <= 1  # this machine's, from psutil


def test_the_scopes_end_ends_what_it_kept_and_nothing_is_kept_outside_one(stand_ins):
    with kept_ranks.reuse_rank_processes():
        with kept_ranks.reuse_rank_processes():
            kept_ranks.keep(_group("a"))
        assert stand_ins == []  # the outer scope is still open
    assert _killed(stand_ins) == ["a0", "a1"] and _removed(stand_ins) == ["a"]
    kept_ranks.keep(_group("b"))
    assert _killed(stand_ins)[2:] == ["b0", "b1"] and kept_ranks._kept == []
    assert kept_ranks.group_key(1, False, {}) is None


def test_a_scope_that_kept_nothing_ends_without_ray(monkeypatch):
    """The suite's scope is open in every test session, the GPU tests' too, where Ray may not be
    installed: its end asks nothing of Ray when nothing is kept."""
    import sys

    for name in {"ray"} | {name for name in sys.modules if name.startswith("ray.")}:
        monkeypatch.setitem(sys.modules, name, None)  # `import ray` (and of its modules) now raises ImportError
    monkeypatch.setattr(kept_ranks, "_kept", [])
    with kept_ranks.reuse_rank_processes():
        pass
    kept_ranks.end_kept()


@pytest.mark.slow
def test_a_kept_group_whose_process_died_is_replaced_by_new_processes(ray_session, demo_checkpoint):
    import ray

    with Engine(_config(demo_checkpoint, ulysses=2)) as first:
        first_pids = _pids(first)
        dying = first.executor.actors[1]
    ray.kill(dying)  # while kept: the next engine takes these processes (the latest kept) and finds one dead
    with Engine(_config(demo_checkpoint, ulysses=2)) as second:
        assert not set(_pids(second)) & set(first_pids)
        second.generate(_request(steps=1))
