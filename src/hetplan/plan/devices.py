"""Devices in what order and in what groups: pure functions over ids and speeds.

Which subsets are searched is ``plan.subsets`` (by counts over the cluster's symmetry).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from hetplan.cluster.spec import Cluster
from hetplan.plan.tp import members
from hetplan.planspec.batch import split_batch

__all__ = ["group_balanced", "groups_by_node", "pipeline_orders", "split_batch"]


def pipeline_orders(
    cluster: Cluster, devices: Sequence[str], speed: Mapping[str, float]
) -> list[tuple[str, ...]]:
    """Stage orders worth trying: consecutive stages stay inside a node (fast links), nodes
    ordered fastest-first and slowest-first (early CNN layers carry big activations, late
    layers big weights: which end suits the fast devices depends on the model)."""
    by_node: dict[str, list[str]] = {}
    for d in devices:
        by_node.setdefault(cluster.device(members(d)[0]).node, []).append(d)
    for ids in by_node.values():
        ids.sort(key=lambda d: -speed[d])

    def node_speed(node: str) -> float:
        return sum(speed[d] for d in by_node[node]) / len(by_node[node])

    fast_first = sorted(by_node, key=lambda n: -node_speed(n))
    orders = [tuple(d for n in fast_first for d in by_node[n])]
    slow_first = tuple(d for n in reversed(fast_first) for d in reversed(by_node[n]))
    if slow_first != orders[0]:
        orders.append(slow_first)
    return orders


def group_balanced(
    devices: Sequence[str], speed: Mapping[str, float], groups: int
) -> list[list[str]]:
    """Split devices into ``groups`` groups of similar total speed (source: Duan & Wu,
    "Optimizing Resource Allocation in Pipeline Parallelism", Algorithm 2: repeatedly give
    the group with the largest cost — the slowest — the device that lowers its cost most).

    The cost of a group is 1 / (sum of its speeds); the device that lowers it most is the
    fastest one left, so the greedy step is: fastest remaining device to the slowest group.
    Every group gets the same number of devices (virtual workers need equal stage counts).
    """
    if groups < 1 or len(devices) % groups:
        raise ValueError(f"{len(devices)} devices cannot form {groups} equal groups")
    size = len(devices) // groups
    out: list[list[str]] = [[] for _ in range(groups)]
    # Open groups by (speed so far, index): the slowest, lowest-index group first.
    heap = [(0.0, g) for g in range(groups)]
    for d in sorted(devices, key=lambda d: -speed[d]):
        power, g = heapq.heappop(heap)
        out[g].append(d)
        if len(out[g]) < size:
            heapq.heappush(heap, (power + speed[d], g))
    return out


def groups_by_node(cluster: Cluster, devices: Sequence[str]) -> list[list[str]]:
    """One group per node (HetPipe's node-per-virtual-worker placement)."""
    by_node: dict[str, list[str]] = {}
    for d in devices:
        by_node.setdefault(cluster.device(members(d)[0]).node, []).append(d)
    return list(by_node.values())
