"""Summary numbers of a cluster (what ``hetplan cluster show`` prints), in SI units."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import combinations

from hetplan.cluster.spec import Cluster


@dataclass(frozen=True, kw_only=True)
class NodeSummary:
    name: str
    devices: dict[str, int]
    """Device count per type name, in order of appearance."""
    intra_link: str | None
    """Kind of the node's default intra-node link, if any."""
    network: str | None
    """Kind of the node's network link, if any."""


@dataclass(frozen=True, kw_only=True)
class PairLink:
    """One pair of devices and the link between them."""

    a: str
    b: str
    kind: str
    bandwidth: float
    """Bytes/s, one direction."""
    latency_s: float


@dataclass(frozen=True, kw_only=True)
class ClusterSummary:
    name: str
    num_devices: int
    nodes: list[NodeSummary]
    device_counts: dict[str, int]
    """Device count per type over the whole cluster."""
    total_memory_bytes: float
    total_fp32_flops: float
    """Sum of peak fp32 FLOP/s, each device scaled by its ``speed``."""
    total_fp16_flops: float
    """Sum of peak fp16 FLOP/s (fp32 where a device has no fp16), scaled by ``speed``."""
    slowest_link: PairLink | None
    """Lowest-bandwidth pair (highest latency on ties); None with a single device."""
    fastest_link: PairLink | None
    """Highest-bandwidth pair (lowest latency on ties); None with a single device."""
    collective_overhead_s: float


def _extremes(cluster: Cluster) -> tuple[PairLink | None, PairLink | None]:
    # O(n^2) over pairs: fine for the cluster sizes hetplan plans for (hundreds of devices).
    slow: PairLink | None = None
    fast: PairLink | None = None
    for da, db in combinations(cluster.devices, 2):
        link = cluster.link(da.id, db.id)
        pair = PairLink(
            a=da.id, b=db.id, kind=link.kind, bandwidth=link.bandwidth, latency_s=link.latency_s
        )
        if slow is None or (pair.bandwidth, -pair.latency_s) < (slow.bandwidth, -slow.latency_s):
            slow = pair
        if fast is None or (pair.bandwidth, -pair.latency_s) > (fast.bandwidth, -fast.latency_s):
            fast = pair
    return slow, fast


def summarize(cluster: Cluster) -> ClusterSummary:
    """Counts, totals and the extreme links of ``cluster``."""
    nodes = []
    for node in cluster.nodes:
        counts = Counter(d.type.name for d in cluster.devices if d.node == node)
        intra = cluster.intra_links.get(node)
        net = cluster.network.get(node)
        nodes.append(
            NodeSummary(
                name=node,
                devices=dict(counts),
                intra_link=intra.kind if intra is not None else None,
                network=net.kind if net is not None else None,
            )
        )
    slow, fast = _extremes(cluster)
    return ClusterSummary(
        name=cluster.name,
        num_devices=len(cluster.devices),
        nodes=nodes,
        device_counts=dict(Counter(d.type.name for d in cluster.devices)),
        total_memory_bytes=sum(d.type.memory_bytes for d in cluster.devices),
        total_fp32_flops=sum(d.type.flops("fp32") * d.speed for d in cluster.devices),
        total_fp16_flops=sum(d.type.flops("fp16") * d.speed for d in cluster.devices),
        slowest_link=slow,
        fastest_link=fast,
        collective_overhead_s=cluster.collective_overhead_s,
    )
