"""The planner over several nodes (`pipedit plan --nodes M --inter-node GBPS`): only layouts the runtime
can place (Ulysses inside a node, decode ranks on the last node), the Ring's hops and the decode
handoff priced on the network between nodes."""

from dataclasses import replace

from pipedit.cli import main
from pipedit.config import load_config
from pipedit.planner.cost import Layout, Shape, handoff_seconds, step_seconds
from pipedit.planner.hardware import node
from pipedit.planner.models import full_size
from pipedit.planner.search import candidates

SHAPE = Shape(720, 1280, 129)


def _two_nodes(gbps: float):
    return replace(node("h100", 8, "nvlink"), gpus=16, nodes=2, inter_node_bandwidth=gbps * 1e9 / 8)


def test_only_layouts_that_keep_ulysses_inside_a_node():
    model = full_size("hunyuan-video")
    found = candidates(model, 16, per_node=8)
    assert found and all(8 % c.ulysses == 0 or c.ulysses * c.ring <= 8 for c in found)
    assert not any(c.ulysses == 16 for c in found) and not any(c.decode_ranks > 8 for c in found)
    assert any(c.ulysses == 8 and c.ring == 2 for c in found)
    assert len(found) < len(candidates(model, 16))  # one 16-GPU node would allow more



def test_aco_is_never_planned_across_nodes():
    """Aco's helpers are decode ranks, on the last node: across nodes every attention call would
    cross the network, so no candidate over two nodes uses it (one 16-GPU node may)."""
    model = full_size("hunyuan-video")
    assert not any(c.aco for c in candidates(model, 16, per_node=8))
    assert any(c.aco for c in candidates(model, 16))


def test_a_slower_network_slows_the_ring_across_nodes_and_the_handoff():
    model = full_size("hunyuan-video")
    fast, slow = _two_nodes(3200), _two_nodes(10)
    across = Layout(ulysses=8, ring=2)
    assert step_seconds(model, SHAPE, slow, across) > step_seconds(model, SHAPE, fast, across)
    inside = Layout(ulysses=8, ring=1)  # one node's ranks: no hop crosses
    assert step_seconds(model, SHAPE, slow, inside) == step_seconds(model, SHAPE, fast, inside)
    assert handoff_seconds(model, SHAPE, slow) > handoff_seconds(model, SHAPE, fast)


def test_plan_ranks_sixteen_gpus_on_two_nodes_and_writes_nodes(tmp_path, capsys):
    written = tmp_path / "best.yaml"
    assert main(["plan", "--model", "hunyuan-video", "--height", "720", "--width", "1280", "--frames", "129",
                 "--gpus", "8", "--nodes", "2", "--top", "3", "--write", str(written)]) == 0
    out = capsys.readouterr().out
    assert "on 16x H100" in out and "2 nodes of 8, 400 Gb/s between nodes" in out
    config = load_config(written)
    assert config.parallel.nodes == 2
    assert config.parallel.ulysses * config.parallel.ring + config.parallel.decode_ranks == 16
