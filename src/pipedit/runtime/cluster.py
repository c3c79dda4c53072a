"""The nodes of the connected Ray cluster, and whether rank groups find room on them.

A rank group on one node is one STRICT_PACK placement group; a rank group over M nodes
(parallel.nodes) is one STRICT_SPREAD group of M bundles, one per node, each holding that node's
ranks. Ray waits without a word for room that never comes, so callers check first and name what
was asked and what each node has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Demand = tuple[float, float]  # (CPUs, GPUs) on one node


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    cpus: float
    gpus: float


def cluster_nodes() -> list[NodeCapacity]:
    """The live nodes of the connected Ray cluster and their total logical resources, named by
    address and the start of Ray's node id (several nodes may share an address)."""
    import ray

    return [NodeCapacity(f"{node.get('NodeManagerAddress', '?')} ({node.get('NodeID', '?')[:8]})",
                         node["Resources"].get("CPU", 0), node["Resources"].get("GPU", 0))
            for node in ray.nodes() if node.get("Alive")]


def bundle_demand(bundle: dict) -> Demand:
    return bundle.get("CPU", 0), bundle.get("GPU", 0)


def fits(groups: Sequence[Sequence[Demand]], nodes: Sequence[NodeCapacity]) -> bool:
    """Whether every group finds, for each of its per-node demands, a different node with room
    (first fit, groups in order; resources taken by one group are gone for the next)."""
    left = {node.name + f"#{index}": [node.cpus, node.gpus] for index, node in enumerate(nodes)}
    for group in groups:
        used: set[str] = set()
        for cpus, gpus in group:
            name = next((n for n, free in left.items()
                         if n not in used and free[0] >= cpus and free[1] >= gpus), None)
            if name is None:
                return False
            used.add(name)
            left[name][0] -= cpus
            left[name][1] -= gpus
    return True


def describe_nodes(nodes: Sequence[NodeCapacity]) -> str:
    return "; ".join(f"{node.name}: {node.cpus:g} CPU(s), {node.gpus:g} GPU(s)" for node in nodes) or "no live node"


def describe_demand(demand: Demand) -> str:
    cpus, gpus = demand
    return f"{cpus:g} CPU(s)" + (f" and {gpus:g} GPU(s)" if gpus else "")
