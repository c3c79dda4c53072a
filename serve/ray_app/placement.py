"""Whether a Ray cluster can place the server's replicas, checked before deploying.

Each replica of a multi-rank engine is one placement group: on one node (STRICT_PACK: the
replica's bundle, then one per rank), or with parallel.nodes M over M different nodes
(STRICT_SPREAD: one bundle per node, the replica in the first); a one-rank replica is one actor.
Serve itself waits for resources that never come without a word (its controller logs "taken more
than 30s to be scheduled" every 30 s), so the check names what was asked and what each node of
the cluster has instead, within seconds."""

from __future__ import annotations

from collections.abc import Sequence

from pipedit.errors import UserInputError
from pipedit.runtime.cluster import (Demand, NodeCapacity, bundle_demand, cluster_nodes, describe_demand,
                                     describe_nodes, fits)

__all__ = ["NodeCapacity", "check_placement", "cluster_nodes", "replica_demand"]


def replica_demand(bundles: Sequence[dict], spread: bool = False) -> list[Demand]:
    """What one replica needs per node: one (CPUs, GPUs) for a replica on one node; with `spread`
    (STRICT_SPREAD over several nodes) one per bundle, each on a node of its own."""
    demands = [bundle_demand(b) for b in bundles]
    if spread:
        return demands
    return [(sum(d[0] for d in demands), sum(d[1] for d in demands))]


def check_placement(demand: Sequence[Demand], replicas: int, nodes: Sequence[NodeCapacity]) -> None:
    """Raises UserInputError unless every replica finds room: for each of its per-node demands a
    node of its own."""
    if not fits([demand] * replicas, nodes):
        raise UserInputError(_refusal(demand, replicas, nodes))


def _refusal(demand: Sequence[Demand], replicas: int, nodes: Sequence[NodeCapacity]) -> str:
    if len(demand) == 1:
        asked = f"{describe_demand(demand[0])} on one node (the replica and one per rank)"
    else:
        asked = (f"{len(demand)} different nodes with " + ", ".join(describe_demand(d) for d in demand)
                 + " (its ranks split over parallel.nodes; the replica on the first)")
    return (f"the server cannot be placed: each of its {replicas} replica(s) needs {asked}, and the Ray cluster "
            f"has {describe_nodes(nodes)}. Use fewer ranks or serve.num_replicas, or a cluster with room for them")
