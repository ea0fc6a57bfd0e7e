"""A resolved :class:`Cluster` back to a :class:`ClusterConfig` (to write it as a file).

Catalog devices and links are written by name; anything else with its full figures. Figures
are written with 12 significant digits, so a reloaded cluster matches to ~1e-12 relative.
"""

from __future__ import annotations

from hetplan.cluster.catalog import DEVICE_CATALOG
from hetplan.cluster.config import (
    ClusterConfig,
    DeviceGroupConfig,
    DeviceTypeConfig,
    LinkConfig,
    NodeConfig,
    NodePairConfig,
    PairConfig,
)
from hetplan.cluster.links import LINK_CATALOG
from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.errors import InputError
from hetplan.units import GB, GiB


def _h(value: float, scale: float) -> float:
    """``value / scale`` rounded to 12 significant digits (tidy files, exact for spec figures)."""
    return float(f"{value / scale:.12g}")


def _link_config(link: Link) -> LinkConfig:
    base = LINK_CATALOG.get(link.kind)
    if base is not None and base.to_link() == link:
        return LinkConfig(type=link.kind)
    return LinkConfig(
        type=base.name if base is not None else None,
        bandwidth_GBps=_h(link.bandwidth, GB),
        latency_us=_h(link.latency_s, 1e-6),
    )


def _type_config(dt: DeviceType) -> DeviceTypeConfig | None:
    """None for an unchanged catalog type; else every figure (a full custom type)."""
    if DEVICE_CATALOG.get(dt.name) == dt:
        return None
    return DeviceTypeConfig(
        peak_tflops={k: _h(v, 1e12) for k, v in dt.peak_flops.items()},
        memory_GiB=_h(dt.memory_bytes, GiB),
        memory_bandwidth_GBps=_h(dt.memory_bandwidth, GB),
        idle_power_w=dt.idle_power_w,
        max_power_w=dt.max_power_w,
        price_per_hour=dt.price_per_hour,
        compute_efficiency=dt.compute_efficiency,
        memory_efficiency=dt.memory_efficiency,
        kernel_overhead_us=_h(dt.kernel_overhead_s, 1e-6),
        source=dt.source or None,
    )


def _groups(devices: list[Device]) -> list[DeviceGroupConfig]:
    """Runs of consecutive devices with the same type, speed and pinning style."""
    groups: list[DeviceGroupConfig] = []
    prev: tuple[str, float, bool] | None = None
    for d in devices:
        key = (d.type.name, d.speed, d.cpus is not None)
        cpus = [list(d.cpus)] if d.cpus is not None else None
        if key == prev:
            last = groups[-1]
            last.count += 1
            if last.cpus is not None and cpus is not None:
                last.cpus.extend(cpus)
        else:
            groups.append(DeviceGroupConfig(type=d.type.name, count=1, cpus=cpus, speed=d.speed))
        prev = key
    return groups


def cluster_to_config(cluster: Cluster) -> ClusterConfig:
    """A config that resolves back to ``cluster`` (device ids must be ``<node>.<index>``)."""
    types: dict[str, DeviceTypeConfig] = {}
    seen: dict[str, DeviceType] = {}
    for d in cluster.devices:
        if d.id != f"{d.node}.{d.index}":
            raise InputError(f"cluster {cluster.name!r}: device id {d.id!r} is not <node>.<index>")
        if seen.setdefault(d.type.name, d.type) != d.type:
            raise InputError(f"cluster {cluster.name!r}: two different types named {d.type.name!r}")
        cfg = _type_config(d.type)
        if cfg is not None:
            types[d.type.name] = cfg
    net_links = [cluster.network.get(n) for n in cluster.nodes]
    shared = net_links[0] if net_links and all(n == net_links[0] for n in net_links) else None
    nodes: list[NodeConfig] = []
    top_pairs: list[PairConfig] = []
    node_pairs: dict[str, list[NodePairConfig]] = {n: [] for n in cluster.nodes}
    for (a, b), link in cluster.pair_links.items():
        da, db = cluster.device(a), cluster.device(b)
        if da.node == db.node:
            pair = NodePairConfig(between=(da.index, db.index), link=_link_config(link))
            node_pairs[da.node].append(pair)
        else:
            top_pairs.append(PairConfig(between=(a, b), link=_link_config(link)))
    for name in cluster.nodes:
        devs = sorted((d for d in cluster.devices if d.node == name), key=lambda d: d.index)
        if [d.index for d in devs] != list(range(len(devs))):
            raise InputError(f"cluster {cluster.name!r}: node {name!r} indices are not 0..n-1")
        intra = cluster.intra_links.get(name)
        own_net = cluster.network.get(name)
        nodes.append(
            NodeConfig(
                name=name,
                devices=_groups(devs),
                link=_link_config(intra) if intra is not None else None,
                pairs=node_pairs[name],
                network=_link_config(own_net) if own_net is not None and shared is None else None,
                address=cluster.addresses.get(name),
            )
        )
    return ClusterConfig(
        name=cluster.name,
        nodes=nodes,
        network=_link_config(shared) if shared is not None else None,
        pairs=top_pairs,
        device_types=types,
        collective_overhead_us=_h(cluster.collective_overhead_s, 1e-6),
        collective_step_latency_us=(
            None if cluster.collective_step_s is None else _h(cluster.collective_step_s, 1e-6)
        ),
        collective_step_bandwidth_GBps=(
            None if cluster.collective_bandwidth is None else _h(cluster.collective_bandwidth, GB)
        ),
    )
