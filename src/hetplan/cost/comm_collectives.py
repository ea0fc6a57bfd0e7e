"""Point-to-point and collective communication times (alpha-beta models).

All functions are pure: bytes in, seconds out. Bandwidths are bytes/s in one direction,
latencies seconds per message. ``allreduce_time`` is the entry point the simulator uses; the
closed forms below it are exposed for tests and documentation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from hetplan.cluster.spec import Cluster, Link

ALGORITHMS = ("auto", "ring", "tree", "hierarchical")


def p2p_time(nbytes: float, link: Link) -> float:
    """Alpha-beta point-to-point time: ``L + S / B`` (0 for ``S <= 0``).

    Source: Hockney's model; the same model as paper 003 Sec. 5.1.2 ("latency of starting
    the communication ... and the ratio between the data size and the link bandwidth").
    """
    return link.transfer_s(nbytes)


def transfer_time(nbytes: float, src: str, dst: str, cluster: Cluster) -> float:
    """``p2p_time`` on the link between devices ``src`` and ``dst``; 0 on the same device."""
    if src == dst or nbytes <= 0:
        return 0.0
    return p2p_time(nbytes, cluster.link(src, dst))


def gpipe_comm_time(boundary_s: Sequence[float], micro_batches: int) -> float:
    """Paper 003 Eq. 6.2: torchgpipe's communication time with stages in lockstep.

    ``boundary_s[j]`` = ``L_{j,j+1} + mb A_j / BW_{j,j+1}``, one message across the cut
    after stage ``j`` (``W - 1`` entries for ``W`` stages). With ``c`` that list::

        T = 2 (sum_{i=1}^{W-2} max(c_1..c_i) + (m - (W-2)) max(c)
               + sum_{i=2}^{W-1} max(c_i..c_{W-1}))

    (fill, full pipeline, drain; forward and backward alike). The thesis found torchgpipe
    does not overlap this with compute; the simulator's own schedule is the primary model,
    this closed form is for comparison.
    """
    c = list(boundary_s)
    if not c:
        return 0.0
    w = len(c) + 1
    fill = sum(max(c[:i]) for i in range(1, w - 1))
    steady = (micro_batches - (w - 2)) * max(c)
    drain = sum(max(c[i - 1 :]) for i in range(2, w))
    return 2 * (fill + steady + drain)


def ring_allreduce_time(nbytes: float, world: int, bandwidth: float, latency_s: float) -> float:
    """Ring allreduce on ``world`` ranks over identical links.

    ``T = 2(W-1)/W * S/B + 2(W-1) * L``: a reduce-scatter then an all-gather, each of
    ``W-1`` steps in which every rank sends ``S/W`` bytes (Patarasuk & Yuan 2009; paper 003
    Eq. 5.1 with equal links). 0 for ``W <= 1`` or ``S <= 0``.
    """
    if world <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (world - 1)
    return steps / world * nbytes / bandwidth + steps * latency_s


def ring_allreduce_time_links(nbytes: float, links: Sequence[Link]) -> float:
    """Ring allreduce where edge ``i`` of the ring is ``links[i]`` (``W = len(links)``).

    ``T = 2(W-1) * max_i (L_i + S / (W * B_i))``: the ranks move in lockstep, so every step
    lasts as long as the slowest edge (paper 003 Eq. 5.1: "only the slowest connection in
    the ring ... needs to be taken into account").
    """
    world = len(links)
    if world <= 1 or nbytes <= 0:
        return 0.0
    step = max(link.latency_s + nbytes / (world * link.bandwidth) for link in links)
    return 2 * (world - 1) * step


def ring_phase_time_links(nbytes: float, links: Sequence[Link]) -> float:
    """One ring reduce-scatter or all-gather: ``(W-1) * max_i (L_i + S / (W * B_i))``."""
    return ring_allreduce_time_links(nbytes, links) / 2.0


def tree_allreduce_time(nbytes: float, world: int, bandwidth: float, latency_s: float) -> float:
    """Double-binary-tree allreduce (NCCL >= 2.4): ``2 ceil(log2 W) L + 2 S / B``.

    A pipelined reduce up and broadcast down two complementary binary trees, each carrying
    half the data (Sanders, Speck & Träff 2009; NVIDIA blog "Massively Scale Your Deep
    Learning Training with NCCL 2.4", 2019). Latency grows with the tree depth
    ``ceil(log2 W)`` in each direction; every rank sends and receives about ``S`` per phase,
    so the bandwidth term is ``2 S / B`` (vs ``2 (W-1)/W S / B`` for the ring). 0 for
    ``W <= 1`` or ``S <= 0``.
    """
    if world <= 1 or nbytes <= 0:
        return 0.0
    depth = math.ceil(math.log2(world))
    return 2 * depth * latency_s + 2 * nbytes / bandwidth


def ring_tree_crossover_bytes(world: int, bandwidth: float, latency_s: float) -> float:
    """Message size below which the tree model beats the ring model on uniform links.

    Solving ``ring(S) = tree(S)``: ``S* = W B L ((W-1) - ceil(log2 W))``. ``allreduce_time``
    with ``algorithm="auto"`` picks the faster model, i.e. the tree below ``S*``. NCCL does
    the same with its own latency/bandwidth tables (``src/graph/tuning.cc``: the algorithm
    with the lowest predicted time wins; ``NCCL_ALGO`` forces one).
    """
    if world <= 2:
        return 0.0
    return world * bandwidth * latency_s * ((world - 1) - math.ceil(math.log2(world)))


def ring_links(
    devices: Sequence[str], cluster: Cluster, *, capped_bandwidth: bool = True
) -> list[Link]:
    """The edges ``d[i] -> d[i+1 mod W]`` of a ring in the given order, with NIC sharing,
    each as a collective's step sees it (:meth:`Cluster.collective_link`: the cluster's
    measured caps on a step's latency and, with ``capped_bandwidth``, bandwidth).

    Edges that cross nodes share the sending node's NIC (transmit) and the receiving node's
    NIC (receive): with ``k`` ring edges leaving a node, each gets ``1/k`` of its bandwidth.
    A ring ordered node by node has one edge out of each node, so no sharing.
    """
    world = len(devices)
    if world <= 1:
        return []
    nodes = [cluster.device(d).node for d in devices]
    edges = [(i, (i + 1) % world) for i in range(world)]
    tx = Counter(nodes[a] for a, b in edges if nodes[a] != nodes[b])
    rx = Counter(nodes[b] for a, b in edges if nodes[a] != nodes[b])
    out: list[Link] = []
    for a, b in edges:
        link = cluster.link(devices[a], devices[b])
        na, nb = nodes[a], nodes[b]
        key = (devices[a], devices[b]) if devices[a] < devices[b] else (devices[b], devices[a])
        if na != nb and key not in cluster.pair_links:
            bw = min(
                cluster.network[na].bandwidth / tx[na],
                cluster.network[nb].bandwidth / rx[nb],
            )
            link = Link(kind=link.kind, bandwidth=bw, latency_s=link.latency_s)
        out.append(cluster.collective_link(link, capped_bandwidth=capped_bandwidth))
    return out


def slowest_link(links: Sequence[Link]) -> Link:
    """A link with the lowest bandwidth and the highest latency of ``links``."""
    return Link(
        kind="slowest",
        bandwidth=min(link.bandwidth for link in links),
        latency_s=max(link.latency_s for link in links),
    )


def hierarchical_allreduce_time(
    nbytes: float, groups: Sequence[Sequence[str]], cluster: Cluster
) -> float:
    """Three-phase allreduce for devices grouped by node (``groups``: one list per node).

    1. ring reduce-scatter inside each node (the slowest node sets the pace),
    2. allreduce of the node-local shards between nodes: the ``k`` local ranks of a node run
       ``k`` concurrent inter-node rings on ``S/k`` bytes each through the same NIC, which
       together move what one ring on ``S`` bytes moves, so it is modelled as one ring of
       ``len(groups)`` ranks on ``S`` bytes over the slowest inter-node edge (group leaders
       in the given order),
    3. ring all-gather inside each node (same cost as 1).

    This is Horovod's ``HOROVOD_HIERARCHICAL_ALLREDUCE`` (NCCL reduce-scatter, MPI
    allreduce, NCCL all-gather; Sergeev & Del Balso 2018) and the bandwidth profile of
    NCCL's topology-aware rings (one NIC crossing per node per direction).
    No collective overhead is added here; ``allreduce_time`` adds it once.
    """
    if nbytes <= 0:
        return 0.0
    groups = [list(g) for g in groups if g]
    intra = max(
        (ring_phase_time_links(nbytes, ring_links(g, cluster)) for g in groups), default=0.0
    )
    leaders = [g[0] for g in groups]
    inter = 0.0
    if len(leaders) > 1:
        slow = slowest_link(ring_links(leaders, cluster))
        inter = ring_allreduce_time(nbytes, len(leaders), slow.bandwidth, slow.latency_s)
    return 2 * intra + inter


def _groups_by_node(devices: Sequence[str], cluster: Cluster) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for d in devices:
        groups.setdefault(cluster.device(d).node, []).append(d)
    return list(groups.values())


NodeCounts = tuple[tuple[int, Link | None, Link | None, int], ...]
# The last (cluster, devices, counts) of _node_counts: its callers price many bucket sizes
# over one group in a row (a 10,000-device search looked up 1.8M devices' nodes without it).
_last_counts: list[tuple[Cluster, tuple[str, ...], NodeCounts]] = []


def _node_counts(devices: Sequence[str], cluster: Cluster) -> NodeCounts:
    key = tuple(devices)
    last = _last_counts[0] if _last_counts else None
    if last is not None and last[0] is cluster and last[1] == key:
        return last[2]
    per = Counter(cluster.device(d).node for d in key)
    link = cluster.collective_link_of
    out = tuple(
        (k, link(cluster.intra_links.get(n)), link(cluster.network.get(n)), 1)
        for n, k in per.items()
    )
    _last_counts[:] = [(cluster, key, out)]
    return out


def allreduce_time(
    nbytes: float,
    devices: Sequence[str],
    cluster: Cluster,
    *,
    algorithm: str = "auto",
    collective_overhead_s: float | None = None,
) -> float:
    """Time of one allreduce of ``nbytes`` among ``devices`` (ring order = given order).

    - ``ring``: ``ring_allreduce_time_links`` over the ring's edges (slowest edge bounds it),
    - ``tree``: ``tree_allreduce_time`` on the slowest edge of the ring,
    - ``hierarchical``: ``hierarchical_allreduce_time`` with devices grouped by node,
    - ``auto``: hierarchical when the devices span several nodes, else the faster of ring
      and tree (what NCCL's tuner does); the ring where any of them is a CPU: the runtime
      then runs gloo, whose ``allreduce`` rings over every rank in order (gloo/allreduce.cc,
      its default algorithm), nodes or not (``Cluster.gloo``).

    Plus ``collective_overhead_s`` (default: ``cluster.collective_overhead_s``) once per call
    (negotiation, buffer allocation and copies; paper 003 Sec. 5.2 on MobileNetV2).
    0 for one device or no bytes.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown allreduce algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if len(devices) <= 1 or nbytes <= 0:
        return 0.0
    if algorithm == "auto" and cluster.gloo(devices):
        algorithm = "ring"
    overhead = (
        cluster.collective_overhead_s if collective_overhead_s is None else collective_overhead_s
    )
    if algorithm == "auto" and not cluster.pair_links:
        # Same value from per-node counts, without building the ring (see its docstring).
        return grouped_allreduce_time(nbytes, _node_counts(devices, cluster), overhead)
    groups = _groups_by_node(devices, cluster)
    if algorithm == "hierarchical" or (algorithm == "auto" and len(groups) > 1):
        return hierarchical_allreduce_time(nbytes, groups, cluster) + overhead
    links = ring_links(devices, cluster)
    ring = ring_allreduce_time_links(nbytes, links)
    slow = slowest_link(links)
    tree = tree_allreduce_time(nbytes, len(devices), slow.bandwidth, slow.latency_s)
    if algorithm == "ring":
        return ring + overhead
    if algorithm == "tree":
        return tree + overhead
    return min(ring, tree) + overhead


def grouped_allreduce_time(
    nbytes: float,
    nodes: Sequence[tuple[int, Link | None, Link | None, int]],
    overhead_s: float,
) -> float:
    """``allreduce_time`` (``auto``) from counts: ``nodes`` lists ``(devices on the node, its
    intra-node link, its network link, how many such nodes)``, the ring ordered node by node.

    Equal to ``allreduce_time`` over the concrete devices, in any order, when no pair
    override touches them (``tests/cost`` checks it against the ring construction):
    a node of ``k`` devices rings over ``k`` edges of its intra link; the leaders' ring has
    one edge out of and into each node, so no NIC is shared, and its slowest edge has the
    lowest network bandwidth and the highest network latency of the nodes used. Cost
    O(len(nodes)), whatever the device count.
    """
    used = [(k, intra, net) for k, intra, net, count in nodes if k > 0 and count > 0]
    world = sum(k * count for k, _, _, count in nodes if k > 0 and count > 0)
    if world <= 1 or nbytes <= 0:
        return 0.0
    machines = sum(count for k, _, _, count in nodes if k > 0 and count > 0)

    def intra_phase(k: int, link: Link | None) -> float:
        if k <= 1:
            return 0.0
        if link is None:
            raise ValueError("a node with several devices has no intra-node link")
        return (k - 1) * (link.latency_s + nbytes / (k * link.bandwidth))

    if machines == 1:
        k, link, _ = used[0]
        if link is None:
            raise ValueError("a node with several devices has no intra-node link")
        ring = 2 * intra_phase(k, link)
        tree = tree_allreduce_time(nbytes, k, link.bandwidth, link.latency_s)
        return min(ring, tree) + overhead_s
    nets = [net for _, _, net in used]
    if any(net is None for net in nets):
        raise ValueError("a node of a multi-node allreduce has no network link")
    bw = min(net.bandwidth for net in nets if net is not None)
    lat = max(net.latency_s for net in nets if net is not None)
    inside = max(intra_phase(k, link) for k, link, _ in used)
    return 2 * inside + ring_allreduce_time(nbytes, machines, bw, lat) + overhead_s
