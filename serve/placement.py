"""Whether a Ray cluster can place the server's replicas, checked before deploying.

Each replica of a multi-rank engine is one STRICT_PACK placement group (the replica's bundle,
then one per rank), so all of a replica's bundles must fit on one node; a one-rank replica is one
actor. Serve itself waits for resources that never come without a word (its controller logs
"taken more than 30s to be scheduled" every 30 s), so the check names what was asked and what
the cluster has instead, within seconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipedit.errors import UserInputError


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    cpus: float
    gpus: float


def replica_demand(bundles: Sequence[dict]) -> tuple[float, float]:
    """(CPUs, GPUs) one replica needs on one node."""
    return sum(b.get("CPU", 0) for b in bundles), sum(b.get("GPU", 0) for b in bundles)


def cluster_nodes() -> list[NodeCapacity]:
    """The live nodes of the connected Ray cluster and their total logical resources."""
    import ray

    return [NodeCapacity(node.get("NodeManagerAddress", "?"), node["Resources"].get("CPU", 0),
                         node["Resources"].get("GPU", 0)) for node in ray.nodes() if node.get("Alive")]


def check_placement(demand: tuple[float, float], replicas: int, nodes: Sequence[NodeCapacity]) -> None:
    """Raises UserInputError unless every replica finds a node with room for all its bundles."""
    cpus, gpus = demand
    left = [[node.cpus, node.gpus] for node in nodes]
    for _ in range(replicas):
        room = next((free for free in left if free[0] >= cpus and free[1] >= gpus), None)
        if room is None:
            raise UserInputError(_refusal(demand, replicas, nodes))
        room[0] -= cpus
        room[1] -= gpus


def _refusal(demand: tuple[float, float], replicas: int, nodes: Sequence[NodeCapacity]) -> str:
    cpus, gpus = demand
    asked = f"{cpus:g} CPU(s)" + (f" and {gpus:g} GPU(s)" if gpus else "")
    has = "; ".join(f"{node.name}: {node.cpus:g} CPU(s), {node.gpus:g} GPU(s)" for node in nodes) or "no live node"
    return (f"the server cannot be placed: each of its {replicas} replica(s) needs {asked} on one node (the "
            f"replica and one per rank), and the Ray cluster has {has}. Use fewer ranks or serve.num_replicas, "
            f"or a cluster with room for them")
