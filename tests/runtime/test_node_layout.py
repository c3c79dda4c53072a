"""parallel.nodes: ranks split evenly in rank order; Ulysses groups inside a node, Ring across
nodes, decode ranks on the last node; layouts that cannot keep that are refused with the fix."""

from dataclasses import replace

import pytest

from pipedit.config import ParallelConfig
from pipedit.errors import UserInputError
from pipedit.runtime.layout import WorldLayout


def test_ulysses_inside_nodes_ring_across():
    layout = WorldLayout(ulysses=2, ring=2, nodes=2)
    assert [layout.node_of(rank) for rank in range(4)] == [0, 0, 1, 1]
    assert layout.ulysses_groups() == [(0, 1), (2, 3)]  # one per node; ring groups (0, 2), (1, 3) cross


def test_sixteen_gpus_on_two_nodes_with_decode_ranks_on_the_last():
    layout = WorldLayout(ulysses=4, ring=3, decode=4, nodes=2)
    assert layout.ranks_per_node == 8
    assert [layout.node_of(rank) for rank in layout.decode_ranks] == [1, 1, 1, 1]
    cfg = WorldLayout(ulysses=2, ring=2, cfg=2, nodes=2)  # each CFG branch's group on a node of its own
    assert [cfg.node_of(rank) for rank in range(8)] == [0] * 4 + [1] * 4


@pytest.mark.parametrize("layout, message", [
    (dict(ulysses=4, nodes=2), r"Ulysses group \[0, 1, 2, 3\] would cross nodes"),
    (dict(ulysses=2, ring=3, nodes=2), r"Ulysses group \[2, 3\] would cross nodes"),
    (dict(ulysses=2, ring=2, nodes=3), "do not split evenly over 3 nodes"),
    (dict(ulysses=2, ring=1, decode=6, nodes=2), "the 6 decode ranks sit on the last node, which holds 4"),
])
def test_layouts_that_do_not_fit_nodes_are_refused(layout, message):
    with pytest.raises(UserInputError, match=message):
        WorldLayout(**layout)


def test_nodes_from_config():
    assert WorldLayout.from_config(ParallelConfig(ulysses=2, ring=2, nodes=2), "dit").nodes == 2
    with pytest.raises(UserInputError, match="parallel.nodes must be an integer >= 1"):
        ParallelConfig(nodes=0)


def test_aco_is_refused_across_nodes_and_auto_leaves_it_off():
    """Across nodes the Aco helpers (decode ranks, last node) would take Q/K/V over the network on
    every attention call: `on` is refused with the reason, `auto` lays the world out without it."""
    with pytest.raises(UserInputError, match="aco on cannot span 2 nodes: the decode ranks"):
        ParallelConfig(ulysses=2, decode_ranks=2, aco="on", nodes=2)
    auto = ParallelConfig(ulysses=2, decode_ranks=2, aco="auto", nodes=2)
    layout = WorldLayout.from_config(auto, "dit")
    assert not layout.aco and [layout.node_of(rank) for rank in layout.decode_ranks] == [1, 1]
    assert WorldLayout.from_config(replace(auto, nodes=1), "dit").aco  # on one node auto may use it
    with pytest.raises(UserInputError, match="Aco cannot span 2 nodes"):
        WorldLayout(ulysses=2, decode=2, aco=True, nodes=2)


def test_a_rank_shares_its_nodes_cores_with_that_nodes_ranks_only(monkeypatch):
    """Ranks over 2 nodes, 2 per node, on 16-core machines: each rank runs 8 torch threads (its
    node's cores over its node's ranks), not 4 (the cores over the whole world's 4 ranks)."""
    import torch
    import torch.distributed as dist

    from pipedit.config import EngineConfig
    from pipedit.runtime.rank import CPU_THREADS_ENV, RankWorker

    monkeypatch.delenv(CPU_THREADS_ENV, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.setattr(dist, "init_process_group", lambda **_: None)  # the group itself is not under test
    worker = RankWorker(EngineConfig(), WorldLayout(ulysses=2, ring=2, nodes=2), rank=2, environment={})
    before = torch.get_num_threads()
    try:
        worker._init_process_group("file:///nowhere")
        assert torch.get_num_threads() == 8
    finally:
        torch.set_num_threads(before)
