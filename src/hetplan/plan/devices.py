"""Which devices, in what order, in what groups: pure functions over ids and speeds.

Subsets are searched by *counts per pool* (a pool = the devices of one type on one node),
never by enumerating all 2^N subsets: small clusters get every count vector, large ones whole
nodes per type, so a 64-device cluster of 4 types on 8 nodes yields 80 subsets.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hetplan.cluster.spec import Cluster
from hetplan.plan.tp import members

MAX_EXHAUSTIVE_SUBSETS = 256
"""Enumerate every count vector per pool up to this many subsets; coarser above."""


@dataclass(frozen=True)
class Pool:
    """Devices of one type on one node, in index order."""

    type_name: str
    node: str
    devices: tuple[str, ...]


def pools(cluster: Cluster) -> list[Pool]:
    """Group the cluster's devices by (type, node), in cluster order."""
    out: dict[tuple[str, str], list[str]] = {}
    for d in cluster.devices:
        out.setdefault((d.type.name, d.node), []).append(d.id)
    return [Pool(t, n, tuple(ids)) for (t, n), ids in out.items()]


def subsets(cluster: Cluster, max_devices: int | None = None) -> list[tuple[str, ...]]:
    """Candidate device subsets (cluster order), largest first, each non-empty.

    Exhaustive over per-pool counts when that is at most MAX_EXHAUSTIVE_SUBSETS subsets;
    otherwise per type a number of whole nodes (all pools of a type are alike in size).
    """
    ps = pools(cluster)
    total = 1
    for p in ps:
        total *= len(p.devices) + 1
    if total <= MAX_EXHAUSTIVE_SUBSETS:
        choices = [[p.devices[:k] for k in range(len(p.devices) + 1)] for p in ps]
    else:
        choices = _whole_nodes_per_type(ps)
    out = []
    for combo in itertools.product(*choices):
        ids = tuple(d for part in combo for d in part)
        if ids and (max_devices is None or len(ids) <= max_devices):
            out.append(ids)
    order = {d.id: i for i, d in enumerate(cluster.devices)}
    out = [tuple(sorted(s, key=order.__getitem__)) for s in out]
    out.sort(key=len, reverse=True)
    return out


def _whole_nodes_per_type(ps: Sequence[Pool]) -> list[list[tuple[str, ...]]]:
    """Per type: the devices of its first k pools, k = 0..number of pools of that type."""
    by_type: dict[str, list[Pool]] = {}
    for p in ps:
        by_type.setdefault(p.type_name, []).append(p)
    choices = []
    for group in by_type.values():
        opts: list[tuple[str, ...]] = [()]
        acc: tuple[str, ...] = ()
        for p in group:
            acc = acc + p.devices
            opts.append(acc)
        choices.append(opts)
    return choices


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


def split_batch(batch: int, weights: Sequence[float], floor: int = 1) -> list[int]:
    """Integer shares of ``batch`` proportional to ``weights`` (largest remainder), each
    >= ``floor``; ValueError when ``batch`` cannot give every replica its floor."""
    n = len(weights)
    if batch < floor * n:
        raise ValueError(f"batch {batch} cannot give each of the {n} replicas {floor} samples")
    total = sum(weights)
    exact = [(batch - floor * n) * w / total for w in weights]
    shares = [floor + int(x) for x in exact]
    rest = batch - sum(shares)
    by_remainder = sorted(range(n), key=lambda i: -(exact[i] - int(exact[i])))
    for i in by_remainder[:rest]:
        shares[i] += 1
    return shares
