"""Resolution of a validated cluster file into SI types: catalog look-ups, ids, links.

Checks that need more than one field (device types defined elsewhere in the file, pair
indices, a network for multi-node clusters) live here; each error names the file and the
field path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetplan.cluster.catalog import DEVICE_CATALOG, catalog_name, device_type
from hetplan.cluster.links import link_type
from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.errors import InputError
from hetplan.units import GB, TERA, GiB, gbit_per_s

if TYPE_CHECKING:
    from hetplan.cluster.config import ClusterConfig, DeviceTypeConfig, LinkConfig, NodeConfig

# Microseconds per second; dividing (not multiplying by 1e-6) keeps 5 us == 5e-6 exactly.
PER_S = 1e6
MAX_RESOLVED_DEVICES = 100_000
"""Most devices a cluster may hold to be resolved (one object per device: what ``plan``,
``predict`` and ``train`` read). Checked from the counts before any device is built, so a
typo such as ``count: 1000000000000`` is refused at once instead of filling memory (issue 28).
The search's own limit is the same (``plan.search.MAX_SEARCH_DEVICES``); ``cluster show``
summarises files of up to ``cluster.summary.MAX_DEVICES`` without resolving them."""


def resolve_link(cfg: LinkConfig) -> Link:
    """A :class:`Link` from a validated link entry (catalog figures, then overrides)."""
    kind, bandwidth, latency = "custom", 0.0, 0.0
    if cfg.type is not None:
        base = link_type(cfg.type)
        kind, bandwidth, latency = base.name, base.bandwidth, base.latency_s
    if cfg.bandwidth_GBps is not None:
        bandwidth = cfg.bandwidth_GBps * GB
    if cfg.bandwidth_gbit is not None:
        bandwidth = gbit_per_s(cfg.bandwidth_gbit)
    if cfg.latency_us is not None:
        latency = cfg.latency_us / PER_S
    return Link(kind=kind, bandwidth=bandwidth, latency_s=latency)


_REQUIRED_CUSTOM = ("memory_GiB", "memory_bandwidth_GBps", "idle_power_w", "max_power_w")


def _custom_base(name: str, cfg: DeviceTypeConfig, where: str) -> DeviceType:
    """A placeholder base for a type outside the catalog: every figure must be given."""
    for fld in _REQUIRED_CUSTOM:
        if getattr(cfg, fld) is None:
            raise InputError(
                f"{where}.{fld}: missing (custom type {name!r} is not in the catalog, so it "
                "needs peak_tflops.fp32, memory_GiB, memory_bandwidth_GBps, idle_power_w, "
                "max_power_w; or set `base` to a catalog type)"
            )
    if "fp32" not in (cfg.peak_tflops or {}):
        raise InputError(f"{where}.peak_tflops.fp32: missing (custom type {name!r} needs it)")
    return DeviceType(
        name=name,
        peak_flops={},
        memory_bandwidth=0.0,
        memory_bytes=0.0,
        idle_power_w=0.0,
        max_power_w=0.0,
        source="custom (cluster file)",
    )


def _device_type(name: str, cfg: DeviceTypeConfig, where: str) -> DeviceType:
    base_name = cfg.base if cfg.base is not None else catalog_name(name)
    if base_name is None:
        base = _custom_base(name, cfg, where)
    else:
        try:
            base = device_type(base_name)
        except InputError as err:
            raise InputError(f"{where}.base: {err}") from None
        if cfg.base is None:
            name = base.name  # an override of a catalog entry keeps the canonical name

    def pick(value: float | None, scale: float, default: float) -> float:
        return default if value is None else value * scale

    flops = dict(base.peak_flops)
    flops.update({k: v * TERA for k, v in (cfg.peak_tflops or {}).items()})
    price = base.price_per_hour if cfg.price_per_hour is None else cfg.price_per_hour
    us = cfg.kernel_overhead_us
    kernel_s = base.kernel_overhead_s if us is None else us / PER_S
    dt = DeviceType(
        name=name,
        is_cpu=base.is_cpu,
        peak_flops=flops,
        memory_bandwidth=pick(cfg.memory_bandwidth_GBps, GB, base.memory_bandwidth),
        memory_bytes=pick(cfg.memory_GiB, GiB, base.memory_bytes),
        idle_power_w=pick(cfg.idle_power_w, 1.0, base.idle_power_w),
        max_power_w=pick(cfg.max_power_w, 1.0, base.max_power_w),
        price_per_hour=price,
        compute_efficiency=pick(cfg.compute_efficiency, 1.0, base.compute_efficiency),
        memory_efficiency=pick(cfg.memory_efficiency, 1.0, base.memory_efficiency),
        kernel_overhead_s=kernel_s,
        source=cfg.source or base.source,
    )
    if dt.idle_power_w > dt.max_power_w:
        raise InputError(
            f"{where}.idle_power_w: expected <= max_power_w ({dt.max_power_w:g} W), "
            f"got {dt.idle_power_w:g} W"
        )
    return dt


def _types(config: ClusterConfig, source: str) -> dict[str, DeviceType]:
    """File-defined and overridden types by lower-case name."""
    return {
        name.lower(): _device_type(name, cfg, f"{source}: device_types.{name}")
        for name, cfg in config.device_types.items()
    }


def _lookup_type(name: str, types: dict[str, DeviceType], where: str) -> DeviceType:
    found = types.get(name.lower())
    if found is not None:
        return found
    if catalog_name(name) is not None:
        return device_type(name)
    known = ", ".join([*DEVICE_CATALOG, *(t.name for t in types.values())])
    raise InputError(f"{where}: unknown device type {name!r}; known: {known}")


def _node_devices(
    node: NodeConfig, i: int, types: dict[str, DeviceType], source: str
) -> list[Device]:
    devices: list[Device] = []
    for j, group in enumerate(node.devices):
        dt = _lookup_type(group.type, types, f"{source}: nodes.{i}.devices.{j}.type")
        for k in range(group.count):
            cpus = tuple(group.cpus[k]) if group.cpus is not None else None
            idx = len(devices)
            devices.append(
                Device(
                    id=f"{node.name}.{idx}",
                    type=dt,
                    node=node.name,
                    index=idx,
                    cpus=cpus,
                    speed=group.speed,
                )
            )
    return devices


def _check_size(config: ClusterConfig, source: str) -> None:
    """InputError, naming the largest ``count``, for more than MAX_RESOLVED_DEVICES devices."""
    counts = [
        (g.count, f"nodes.{i}.devices.{j}.count")
        for i, node in enumerate(config.nodes)
        for j, g in enumerate(node.devices)
    ]
    total = sum(c for c, _ in counts)
    if total > MAX_RESOLVED_DEVICES:
        count, where = max(counts)
        raise InputError(
            f"{source}: {total:,} devices (the largest group: {where} = {count:,}); expected at "
            f"most {MAX_RESOLVED_DEVICES:,} to plan, predict or run (`hetplan cluster show` "
            "summarises larger files)"
        )


def _pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def resolve_config(config: ClusterConfig, source: str) -> Cluster:
    """Resolve a validated :class:`ClusterConfig` into a :class:`Cluster` (SI units)."""
    _check_size(config, source)
    types = _types(config, source)
    devices: list[Device] = []
    intra: dict[str, Link] = {}
    network: dict[str, Link] = {}
    pairs: dict[tuple[str, str], Link] = {}
    multi_node = len(config.nodes) > 1
    for i, node in enumerate(config.nodes):
        node_devs = _node_devices(node, i, types, source)
        devices.extend(node_devs)
        if node.link is not None:
            intra[node.name] = resolve_link(node.link)
        elif len(node_devs) > 1:
            raise InputError(
                f"{source}: nodes.{i}.link: missing (node {node.name!r} has {len(node_devs)} "
                "devices; expected e.g. {type: NVLink2} or {bandwidth_GBps: 12, latency_us: 5})"
            )
        for p, pair in enumerate(node.pairs):
            a, b = pair.between
            if a == b or not (0 <= a < len(node_devs) and 0 <= b < len(node_devs)):
                raise InputError(
                    f"{source}: nodes.{i}.pairs.{p}.between: expected two different device "
                    f"indices in 0..{len(node_devs) - 1} (got [{a}, {b}])"
                )
            pairs[_pair_key(node_devs[a].id, node_devs[b].id)] = resolve_link(pair.link)
        net = node.network if node.network is not None else config.network
        if net is not None:
            network[node.name] = resolve_link(net)
        elif multi_node:
            raise InputError(
                f"{source}: network: missing (cluster has {len(config.nodes)} nodes and node "
                f"{node.name!r} sets no network; expected e.g. {{type: 10GbE}})"
            )
    ids = {d.id for d in devices}
    for p, gpair in enumerate(config.pairs):
        a_id, b_id = gpair.between
        bad = [x for x in (a_id, b_id) if x not in ids]
        if bad or a_id == b_id:
            what = f"unknown device id {bad[0]!r}" if bad else "the same device twice"
            raise InputError(
                f"{source}: pairs.{p}.between: {what}; expected two ids like "
                f"{devices[0].id!r} (known: {', '.join(sorted(ids))})"
            )
        pairs[_pair_key(a_id, b_id)] = resolve_link(gpair.link)
    return Cluster(
        name=config.name,
        devices=tuple(devices),
        intra_links=intra,
        pair_links=pairs,
        network=network,
        collective_overhead_s=config.collective_overhead_us / PER_S,
        collective_step_s=(
            None
            if config.collective_step_latency_us is None
            else config.collective_step_latency_us / PER_S
        ),
        collective_bandwidth=(
            None
            if config.collective_step_bandwidth_GBps is None
            else config.collective_step_bandwidth_GBps * GB
        ),
        addresses={n.name: n.address for n in config.nodes if n.address is not None},
    )
