"""Symmetry of a cluster: interchangeable nodes and devices, and device subsets by counts.

Two nodes have the same *shape* when they hold the same device pools (type, speed, CPU
threads, count, in order) behind the same intra-node and network links, and no per-pair link
override touches them; the devices of one pool position in nodes of one shape form a *class*.
Every cost the planner computes is the same for any two members of a class, so the search works
on counts:

- a *selection* is, per shape, the per-node count vector of each node (how many devices of each
  of the shape's classes it uses), sorted in decreasing order. That is the canonical member of
  the orbit of identity-level subsets under swapping nodes of one shape and devices of one
  class, so enumerating selections is the identity-level search with duplicates removed;
- ``devices`` places a selection on concrete ids (node ``i`` of a shape gets vector ``i``,
  a class's first ``n`` devices on it), only for the candidates the search keeps.

Nothing here is O(devices) except ``devices`` and building the classes once.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter

from hetplan.cluster.spec import Cluster, Link
from hetplan.cost.threads import compute_kind

Counts = tuple[int, ...]
"""Devices used of each class of a shape, on one node."""
Selection = tuple[tuple[Counts, ...], ...]
"""Per shape, per node of the shape (in decreasing order), the counts of its classes."""


@dataclass(frozen=True, kw_only=True)
class DeviceClass:
    """The devices at one pool position of every node of one shape."""

    index: int
    shape: int
    position: int
    """Index of this class among its shape's classes."""
    type_name: str
    speed: float
    threads: int | None = None
    """Intra-op threads of a CPU class (``cost.threads``); None for GPUs."""
    per_node: int
    devices: tuple[tuple[str, ...], ...]
    """Per node of the shape (cluster order), this class's device ids (cluster order)."""

    @property
    def total(self) -> int:
        return self.per_node * len(self.devices)

    @property
    def rep(self) -> str:
        """A member: every cost of the class is this device's."""
        return self.devices[0][0]


@dataclass(frozen=True, kw_only=True)
class Shape:
    """Nodes that are interchangeable, with the links every one of them has."""

    index: int
    nodes: tuple[str, ...]
    classes: tuple[int, ...]
    """Indices into ``Symmetry.classes``, in pool order."""
    intra: Link | None
    network: Link | None


@dataclass(frozen=True, kw_only=True)
class Symmetry:
    """The shapes and classes of a cluster."""

    shapes: tuple[Shape, ...]
    classes: tuple[DeviceClass, ...]
    order: dict[str, int]
    """Device id -> position in cluster order (to sort a placed subset)."""

    def counts(self, sel: Selection) -> list[int]:
        """Devices used per class."""
        out = [0] * len(self.classes)
        for shape, vectors in zip(self.shapes, sel, strict=True):
            for pos, cls in enumerate(shape.classes):
                out[cls] = sum(map(itemgetter(pos), vectors))
        return out

    def size(self, sel: Selection) -> int:
        # Per node in C (map): a datacenter's selections have a vector per node.
        return sum(sum(map(sum, vectors)) for vectors in sel)

    def ring(self, sel: Selection) -> list[tuple[int, Link | None, Link | None, int]]:
        """``(devices on a node, intra link, network link, nodes)`` of the nodes used, for
        ``cost.comm_collectives.grouped_allreduce_time``."""
        per: dict[tuple[int, int], int] = {}
        for shape, vectors in zip(self.shapes, sel, strict=True):
            for k, n in Counter(map(sum, vectors)).items():  # in the nodes' order, as a loop
                if k:
                    per[(shape.index, k)] = per.get((shape.index, k), 0) + n
        return [(k, self.shapes[s].intra, self.shapes[s].network, n) for (s, k), n in per.items()]

    def devices(self, sel: Selection) -> tuple[str, ...]:
        """The concrete devices of ``sel``, in cluster order."""
        ids: list[str] = []
        for shape, vectors in zip(self.shapes, sel, strict=True):
            for node, v in enumerate(vectors):
                for pos, cls in enumerate(shape.classes):
                    ids.extend(self.classes[cls].devices[node][: v[pos]])
        return tuple(sorted(ids, key=self.order.__getitem__))


def symmetry(cluster: Cluster) -> Symmetry:
    """Group the cluster's nodes by shape and their devices by class (one pass)."""
    overridden = {d for pair in cluster.pair_links for d in pair}
    pools: dict[str, list[tuple[tuple[str, float, int | None], list[str]]]] = {}
    for d in cluster.devices:
        held = pools.setdefault(d.node, [])
        kind = compute_kind(d)
        if held and held[-1][0] == kind:
            held[-1][1].append(d.id)
        else:
            held.append((kind, [d.id]))
    by_key: dict[object, list[str]] = {}
    for node, node_pools in pools.items():
        key: object = (
            tuple((kind, len(ids)) for kind, ids in node_pools),
            _link_key(cluster.intra_links.get(node)),
            _link_key(cluster.network.get(node)),
        )
        if any(i in overridden for _, ids in node_pools for i in ids):
            key = ("unique", node)  # a pair override makes this node unlike any other
        by_key.setdefault(key, []).append(node)
    shapes: list[Shape] = []
    classes: list[DeviceClass] = []
    for s, nodes in enumerate(by_key.values()):
        first = pools[nodes[0]]
        idx = []
        for pos, ((type_name, speed, threads), ids) in enumerate(first):
            idx.append(len(classes))
            classes.append(
                DeviceClass(
                    index=len(classes),
                    shape=s,
                    position=pos,
                    type_name=type_name,
                    speed=speed,
                    threads=threads,
                    per_node=len(ids),
                    devices=tuple(tuple(pools[n][pos][1]) for n in nodes),
                )
            )
        shapes.append(
            Shape(
                index=s,
                nodes=tuple(nodes),
                classes=tuple(idx),
                intra=cluster.intra_links.get(nodes[0]),
                network=cluster.network.get(nodes[0]),
            )
        )
    order = {d.id: i for i, d in enumerate(cluster.devices)}
    return Symmetry(shapes=tuple(shapes), classes=tuple(classes), order=order)


def _link_key(link: Link | None) -> object:
    return None if link is None else (link.kind, link.bandwidth, link.latency_s)


def _vectors(sym: Symmetry, shape: Shape) -> list[Counts]:
    """Every per-node count vector of ``shape``, decreasing."""
    ranges = [range(sym.classes[c].per_node, -1, -1) for c in shape.classes]
    return list(itertools.product(*ranges))


def orbit_count(sym: Symmetry) -> int:
    """Selections in the exact (device-level) space: multisets of node vectors per shape."""
    total = 1
    for shape in sym.shapes:
        vectors = math.prod(sym.classes[c].per_node + 1 for c in shape.classes)
        total *= math.comb(vectors + len(shape.nodes) - 1, len(shape.nodes))
    return total


def orbits(sym: Symmetry) -> Iterator[Selection]:
    """Every selection of the exact space (including the empty one)."""
    per_shape = [
        itertools.combinations_with_replacement(_vectors(sym, s), len(s.nodes)) for s in sym.shapes
    ]
    yield from itertools.product(*(list(p) for p in per_shape))


def node_level(sym: Symmetry, nodes: Sequence[int]) -> Selection:
    """Whole nodes' worth of each class: class ``c`` on the first ``nodes[c]`` nodes of its
    shape (the nodes a class uses are packed, never half-filled)."""
    out = []
    for shape in sym.shapes:
        # Node i's vector changes only where i reaches some nodes[c]: one tuple per run.
        n = len(shape.nodes)
        cuts = sorted({0, n, *(min(max(nodes[c], 0), n) for c in shape.classes)})
        vectors: list[tuple[int, ...]] = []
        for a, b in itertools.pairwise(cuts):
            v = tuple(sym.classes[c].per_node if a < nodes[c] else 0 for c in shape.classes)
            vectors.extend([v] * (b - a))
        out.append(tuple(vectors))
    return tuple(out)


def node_level_count(sym: Symmetry) -> int:
    """Selections with whole nodes per class."""
    return math.prod(len(sym.shapes[c.shape].nodes) + 1 for c in sym.classes)


def node_levels(sym: Symmetry) -> Iterator[Selection]:
    """Every whole-node selection (including the empty one)."""
    ranges = [range(len(sym.shapes[c.shape].nodes), -1, -1) for c in sym.classes]
    for nodes in itertools.product(*ranges):
        yield node_level(sym, nodes)


def class_devices(sym: Symmetry, sel: Selection) -> list[list[str]]:
    """Per class (index order), its devices used by ``sel`` (empty lists included)."""
    out: list[list[str]] = [[] for _ in sym.classes]
    for shape, vectors in zip(sym.shapes, sel, strict=True):
        for node, v in enumerate(vectors):
            for pos, cls in enumerate(shape.classes):
                out[cls].extend(sym.classes[cls].devices[node][: v[pos]])
    return out
