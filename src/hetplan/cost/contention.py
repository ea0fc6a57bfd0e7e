"""Collectives that run at the same time share each node's network link (issue 30, item 7).

The collective models (:mod:`hetplan.cost.comm_collectives`) share a node's network card among
the edges of *one* collective. Several collectives at once are another matter: the ``t``
tensor-parallel ranks of a stage each all-reduce their gradients with the same rank of the
other replicas at the same moment, so a node holding the stage sends ``t`` streams through one
card (Megatron-LM's data-parallel groups, one per TP rank). Each stream gets its share of the
card: the node's network bandwidth divided by the number of those collectives that cross it.
Per-pair link overrides between nodes are taken as they are (they describe a dedicated path).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from hetplan.cluster.spec import Cluster


def crossing_streams(groups: Sequence[Sequence[str]], cluster: Cluster) -> Counter[str]:
    """Per node, how many of ``groups`` (device lists of collectives running at the same
    time) have a device on it and one on another node: the streams through its card."""
    out: Counter[str] = Counter()
    for group in groups:
        nodes = {cluster.device(d).node for d in group}
        if len(nodes) > 1:
            out.update(nodes)
    return out


def sharing_network(cluster: Cluster, streams: Counter[str]) -> Cluster:
    """``cluster`` with each node's network bandwidth split among its ``streams``."""
    # Over the streams, not the cluster's nodes: thousands of nodes, a few shared ones. The
    # merge below keeps the network's order whatever this one is.
    network = cluster.network
    shared = {
        node: dataclasses.replace(network[node], bandwidth=network[node].bandwidth / count)
        for node, count in streams.items()
        if count > 1 and node in network
    }
    if not shared:
        return cluster
    return dataclasses.replace(cluster, network={**cluster.network, **shared})


def concurrent_cluster(groups: Sequence[Sequence[str]], cluster: Cluster) -> Cluster:
    """The cluster as each of ``groups``' concurrent collectives sees it."""
    return sharing_network(cluster, crossing_streams(groups, cluster))
