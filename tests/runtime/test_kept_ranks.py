"""Rank processes kept from one engine to the next (pipedit.runtime.kept_ranks). The suite runs
inside one scope (conftest), so the engines here take and leave groups as every test's do: the
same processes serve a second engine with the same rank kinds, on another model, with that
model's single-device latents (1e-4 of their largest, the contract's bound for final latents:
Ulysses only moves data); a group that saw a failure is not kept. The scope's rules (the bound,
a scope's end, nothing kept outside one, another Ray session's groups) run on stand-ins for groups."""

import os

import pytest

from e2e_helpers import Case, single_device_latents
from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import VideoRequest
from pipedit.runtime import kept_ranks
from pipedit.runtime.engine import Engine
from pipedit.runtime.rank_failure import RankGroupError

CASE = Case("a paper boat on a canal", height=48, width=80, frames=9, steps=2, seed=4)


def _config(checkpoint) -> EngineConfig:
    return EngineConfig(model=ModelConfig(path=str(checkpoint)), parallel=ParallelConfig(ulysses=2))


def _pids(engine) -> list[int]:
    import ray

    return ray.get([actor.__ray_call__.remote(lambda _: os.getpid()) for actor in engine.executor.actors])


def _kept_actors() -> list:
    return [actor for kept in kept_ranks._kept for actor in kept.actors]


@pytest.mark.slow  # rank groups on Ray
def test_a_second_engine_takes_the_first_ones_rank_processes(ray_session, demo_checkpoint, wan_three_heads):
    with Engine(_config(demo_checkpoint)) as first:
        first_pids = _pids(first)
        first.generate(VideoRequest(CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames,
                                    steps=2))
    with Engine(_config(wan_three_heads)) as second:  # another family: nothing of the first may remain
        assert _pids(second) == first_pids
        latents = second.generate(VideoRequest(CASE.prompt, height=CASE.height, width=CASE.width,
                                               num_frames=CASE.frames, steps=CASE.steps, seed=CASE.seed)).latents
    reference = single_device_latents(wan_three_heads, CASE)
    assert (latents - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()


@pytest.mark.slow
def test_a_group_that_saw_a_failure_is_not_kept(ray_session, demo_checkpoint):
    with Engine(_config(demo_checkpoint)) as engine:
        actors = list(engine.executor.actors)
        with pytest.raises(RankGroupError):
            engine.executor.call_rank(1, "aco_shape", None)  # fails in the rank: no job, no request
    assert not set(map(id, actors)) & set(map(id, _kept_actors()))


@pytest.fixture
def stand_ins(monkeypatch):
    """No scope open and nothing kept (the session's scope set aside); ended groups recorded."""
    ended = []
    monkeypatch.setattr(kept_ranks, "_open_scopes", 0)
    monkeypatch.setattr(kept_ranks, "_kept", [])
    monkeypatch.setattr(kept_ranks, "end_group", lambda actors, group: ended.append(group))
    return ended


def _group(name: str, job: str = "job") -> kept_ranks.KeptGroup:
    return kept_ranks.KeptGroup((name, job), name, lambda rank: rank, [f"{name}0", f"{name}1"], (2, 0))


def test_the_longest_unused_groups_go_first_beyond_the_bound(stand_ins):
    with kept_ranks.reuse_rank_processes():
        for name in ("a", "b", "c"):  # two ranks each: 6 > KEEP_AT_MOST_RANKS (5)
            kept_ranks.keep(_group(name))
        assert stand_ins == ["a"]
        assert kept_ranks.take(("b", "job")).group == "b"
        assert kept_ranks.take(("a", "job")) is None
        kept_ranks.keep(_group("d"))
        assert kept_ranks.take(("c", "another job")) is None  # a new Ray session: c and d were the old one's
        assert stand_ins == ["a", "c", "d"]


def test_the_scopes_end_ends_what_it_kept_and_nothing_is_kept_outside_one(stand_ins):
    with kept_ranks.reuse_rank_processes():
        with kept_ranks.reuse_rank_processes():
            kept_ranks.keep(_group("a"))
        assert stand_ins == []  # the outer scope is still open
    assert stand_ins == ["a"]
    kept_ranks.keep(_group("b"))
    assert stand_ins == ["a", "b"] and kept_ranks._kept == []
    assert kept_ranks.group_key(("DenoiseWorker",) * 2, 1, False, {}) is None


@pytest.mark.slow
def test_a_kept_group_whose_process_died_is_replaced_by_new_processes(ray_session, demo_checkpoint):
    import ray

    with Engine(_config(demo_checkpoint)) as first:
        first_pids = _pids(first)
        dying = first.executor.actors[1]
    ray.kill(dying)  # while kept: the next engine takes this group (the latest kept) and finds it broken
    with Engine(_config(demo_checkpoint)) as second:
        assert not set(_pids(second)) & set(first_pids)
        second.generate(VideoRequest(CASE.prompt, height=CASE.height, width=CASE.width, num_frames=CASE.frames,
                                     steps=1))
