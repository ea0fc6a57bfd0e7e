"""The cluster file: a YAML schema in human units, loaded, validated and written back.

Units in the file are in the field names:

- ``bandwidth_GBps``: gigabytes per second (1e9 B/s); ``bandwidth_gbit``: gigabits per
  second (1e9 bit/s, as network gear is quoted). Give one of the two.
- ``latency_us``, ``kernel_overhead_us``, ``collective_overhead_us``,
  ``collective_step_latency_us``: microseconds; ``collective_step_bandwidth_GBps``: GB/s.
- ``memory_GiB``: gibibytes; ``memory_bandwidth_GBps``: GB/s; ``peak_tflops``: TFLOP/s per
  dtype; ``*_power_w``: watts; ``price_per_hour``: USD per hour.

Example::

    name: two-nodes
    nodes:
      - name: n0
        devices: [{type: V100-32GB, count: 4}]
        link: {type: NVLink2}
      - name: n1
        devices: [{type: T4, count: 4}]
        link: {type: PCIe3x16}
    network: {type: 10GbE}

Full schema (``?`` marks optional keys)::

    name: str
    nodes:                         # at least one; names unique, no spaces
      - name: str
        devices:                   # ids are <node name>.<index>, counted across groups
          - type: str              # catalog name (case-insensitive) or a device_types key
            count?: int = 1
            cpus?: [[int, ...], ...]   # one core list per device (CPU clusters)
            speed?: float = 1.0        # fraction of the type's throughput
        link?: LINK                # required when the node has more than one device
        pairs?: [{between: [i, j], link: LINK}]   # indices within the node
        network?: LINK             # this node's link to the network (overrides top level)
        address?: str              # host name or IP where the node is reachable (below)
    network?: LINK                 # required with more than one node
    pairs?: [{between: [id, id], link: LINK}]     # any two devices, e.g. measured figures
    device_types?:                 # custom types (full figures) or catalog overrides
      NAME:
        base?: str                 # catalog type to start from (default: NAME if in catalog)
        peak_tflops?: {fp32: .., tf32: .., fp16: .., bf16: ..}   # merged into the base's
        memory_GiB?, memory_bandwidth_GBps?, idle_power_w?, max_power_w?, price_per_hour?,
        compute_efficiency?, memory_efficiency?, kernel_overhead_us?, source?
    collective_overhead_us?: float = 30   # DEFAULT_COLLECTIVE_OVERHEAD_S
    collective_step_latency_us?: float    # a collective step's latency, measured (below)
    collective_step_bandwidth_GBps?: float  # a collective step's bandwidth, measured (below)
    # LINK: {type: CATALOG_LINK, bandwidth_GBps|bandwidth_gbit?, latency_us?}
    #    or {bandwidth_GBps|bandwidth_gbit: .., latency_us: ..}

``collective_step_latency_us`` and ``collective_step_bandwidth_GBps`` cap the latency and the
bandwidth of every step of a ring collective (all-reduce, reduce-scatter, all-gather) and of
gloo's reduce and broadcast, whatever the pair links say. ``hetplan profile-links`` writes
them from its all-reduce over every rank: the latency where the all-reduce's intercept is
below what the pairs' ping-pongs predict (CPU ranks sharing a core: a ping-pong waits for the
partner's time slice, a collective's ranks all wait on their next step at once), the
bandwidth where its slope is above (CPU ranks over loopback: in a collective every rank sends,
receives and adds at once on its own core, where a ping-pong does one of them at a time);
docs/cost-models.md §5.1, "gloo's calls".

``address`` is where the other nodes reach this node: ``hetplan train --print-commands`` puts
the first node's into ``--rdzv ADDRESS:29400`` (without one, the node's name, which must then
resolve). Nodes on one machine (``examples/clusters/loopback-2node.yaml``) say ``127.0.0.1``.

Between nodes, two devices use the slower of their nodes' network links with the larger of
the two (end-to-end) latencies (:meth:`Cluster.link`). :func:`load_cluster` resolves a file into a
:class:`~hetplan.cluster.spec.Cluster` (SI units); :func:`write_cluster_config` writes a
(possibly edited) :class:`ClusterConfig` back, e.g. with measured link figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hetplan.cluster.links import LINK_CATALOG, link_type
from hetplan.cluster.resolve import resolve_config
from hetplan.cluster.spec import DEFAULT_COLLECTIVE_OVERHEAD_S, Cluster
from hetplan.errors import InputError
from hetplan.planspec.dtypes import PEAK_DTYPES as DTYPES  # keys accepted in ``peak_tflops``
from hetplan.serde import from_data, read_structured, to_data, write_text_atomic
from hetplan.units import US


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name}: expected a finite number > 0 (got {value})")


def _non_negative(name: str, value: float | None) -> None:
    if value is not None and not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name}: expected a finite number >= 0 (got {value})")


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


@dataclass(kw_only=True)
class LinkConfig:
    """A link: a catalog ``type`` (figures may be overridden) or explicit figures."""

    type: str | None = None
    """Catalog link name (``NVLink2``, ``PCIe3x16``, ``10GbE``, ``shm``, ``EDR``, ...)."""
    bandwidth_GBps: float | None = None  # noqa: N815 (unit in the name)
    """Effective one-direction bandwidth, GB/s."""
    bandwidth_gbit: float | None = None
    """Effective one-direction bandwidth, Gbit/s."""
    latency_us: float | None = None
    """One-way latency per message, microseconds."""

    def __post_init__(self) -> None:
        _positive("bandwidth_GBps", self.bandwidth_GBps)
        _positive("bandwidth_gbit", self.bandwidth_gbit)
        _non_negative("latency_us", self.latency_us)
        if self.bandwidth_GBps is not None and self.bandwidth_gbit is not None:
            raise ValueError("give one of bandwidth_GBps and bandwidth_gbit, not both")
        if self.type is not None:
            try:
                link_type(self.type)
            except InputError as err:
                raise ValueError(f"type: {err}") from None
            return
        if self.bandwidth_GBps is None and self.bandwidth_gbit is None:
            known = ", ".join(LINK_CATALOG)
            raise ValueError(
                "expected `type` (one of " + known + ") or `bandwidth_GBps`/`bandwidth_gbit`"
                " with `latency_us`"
            )
        if self.latency_us is None:
            raise ValueError("latency_us: missing (required when no link `type` is given)")


@dataclass(kw_only=True)
class DeviceGroupConfig:
    """``count`` devices of one type in a node."""

    type: str
    """Catalog name or a name defined under ``device_types``."""
    count: int = 1
    cpus: list[list[int]] | None = None
    """Per device, the CPU cores to pin its process to (CPU clusters); ``count`` lists."""
    speed: float = 1.0
    """Fraction of the type's throughput each device gets (0.5: two processes on a core)."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"count: expected an integer >= 1 (got {self.count})")
        _positive("speed", self.speed)
        if self.cpus is None:
            return
        if len(self.cpus) != self.count:
            raise ValueError(
                f"cpus: expected one list of cores per device ({self.count}), got {len(self.cpus)}"
            )
        for cores in self.cpus:
            if not cores or min(cores) < 0:
                raise ValueError(f"cpus: expected non-empty lists of core ids >= 0 (got {cores})")


@dataclass(kw_only=True)
class NodePairConfig:
    """A link override between two devices of one node, by index within the node."""

    between: tuple[int, int]
    link: LinkConfig


@dataclass(kw_only=True)
class PairConfig:
    """A link override between two devices anywhere, by device id (``node.index``)."""

    between: tuple[str, str]
    link: LinkConfig


@dataclass(kw_only=True)
class NodeConfig:
    """One host."""

    name: str
    devices: list[DeviceGroupConfig]
    link: LinkConfig | None = None
    """Default link between two devices of this node (required with more than one device)."""
    pairs: list[NodePairConfig] = field(default_factory=list)
    network: LinkConfig | None = None
    """This node's link to the network, overriding the top-level ``network``."""
    address: str | None = None
    """Host name or IP address where the other nodes reach this node (the first node's is
    the rendezvous of a run over several nodes); None: the node's name."""

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"name: expected a non-empty name without spaces (got {self.name!r})")
        if self.address is not None and (not self.address or _has_space(self.address)):
            raise ValueError(
                f"address: expected a host name or IP address, e.g. 10.0.0.5 (got {self.address!r})"
            )
        if not self.devices:
            raise ValueError("devices: expected at least one device group")


@dataclass(kw_only=True)
class DeviceTypeConfig:
    """A custom device type (full figures) or overrides of a catalog type's figures."""

    base: str | None = None
    """Catalog type to start from; defaults to the entry's own name if that is in the catalog."""
    peak_tflops: dict[str, float] | None = None
    """Peak dense TFLOP/s per dtype (fp32, tf32, fp16, bf16); merged into the base's."""
    memory_GiB: float | None = None  # noqa: N815 (unit in the name)
    memory_bandwidth_GBps: float | None = None  # noqa: N815 (unit in the name)
    idle_power_w: float | None = None
    max_power_w: float | None = None
    price_per_hour: float | None = None
    compute_efficiency: float | None = None
    memory_efficiency: float | None = None
    kernel_overhead_us: float | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        for dtype, value in (self.peak_tflops or {}).items():
            if dtype not in DTYPES:
                raise ValueError(f"peak_tflops.{dtype}: unknown dtype; expected one of {DTYPES}")
            _positive(f"peak_tflops.{dtype}", value)
        _positive("memory_GiB", self.memory_GiB)
        _positive("memory_bandwidth_GBps", self.memory_bandwidth_GBps)
        _non_negative("idle_power_w", self.idle_power_w)
        _positive("max_power_w", self.max_power_w)
        _non_negative("price_per_hour", self.price_per_hour)
        _non_negative("kernel_overhead_us", self.kernel_overhead_us)
        for name in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name}: expected a fraction in (0, 1] (got {value})")


@dataclass(kw_only=True)
class ClusterConfig:
    """A cluster file."""

    name: str
    nodes: list[NodeConfig]
    network: LinkConfig | None = None
    """Each node's link to the inter-node network (required with more than one node)."""
    pairs: list[PairConfig] = field(default_factory=list)
    device_types: dict[str, DeviceTypeConfig] = field(default_factory=dict)
    collective_overhead_us: float = round(DEFAULT_COLLECTIVE_OVERHEAD_S / US, 6)
    """Fixed cost per collective call, microseconds."""
    collective_step_latency_us: float | None = None
    """The most one step of a collective waits on its link, microseconds (None: the pair
    latencies alone)."""
    collective_step_bandwidth_GBps: float | None = None  # noqa: N815 (unit in the name)
    """The most bandwidth one edge of a collective's step gets, GB/s (None: the pair
    bandwidths alone)."""

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("nodes: expected at least one node")
        seen: set[str] = set()
        for i, node in enumerate(self.nodes):
            if node.name in seen:
                raise ValueError(f"nodes.{i}.name: duplicate node name {node.name!r}")
            seen.add(node.name)
        _non_negative("collective_overhead_us", self.collective_overhead_us)
        if self.collective_step_latency_us is not None:
            _non_negative("collective_step_latency_us", self.collective_step_latency_us)
        _positive("collective_step_bandwidth_GBps", self.collective_step_bandwidth_GBps)


def config_from_data(data: Any, source: str) -> ClusterConfig:
    """Validate plain data (parsed YAML/JSON) into a :class:`ClusterConfig`."""
    if data is None:
        raise InputError(f"{source}: empty file; expected a mapping with `name` and `nodes`")
    return from_data(ClusterConfig, data, source)


def load_cluster_config(path: Path) -> ClusterConfig:
    """Read a cluster file without resolving it (to edit and write it back)."""
    return config_from_data(read_structured(path), str(path))


def cluster_from_data(data: Any, source: str) -> Cluster:
    """Validate and resolve plain data into a :class:`Cluster`; errors name ``source``."""
    return resolve_config(config_from_data(data, source), source)


def load_cluster(path: Path) -> Cluster:
    """Read and resolve a cluster file (YAML or JSON)."""
    return cluster_from_data(read_structured(path), str(path))


def _prune(data: Any) -> Any:
    """Drop None values and empty lists/dicts so written files stay short."""
    if isinstance(data, dict):
        pruned = {k: _prune(v) for k, v in data.items()}
        return {k: v for k, v in pruned.items() if v is not None and v not in ([], {})}
    if isinstance(data, list):
        return [_prune(v) for v in data]
    return data


def config_to_data(config: ClusterConfig) -> dict[str, Any]:
    """Plain data for ``config``; ``config_from_data`` of it gives ``config`` back."""
    data: dict[str, Any] = _prune(to_data(config))
    return data


def write_cluster_config(path: Path, config: ClusterConfig) -> None:
    """Write ``config`` as a YAML cluster file (via a temporary file)."""
    text = yaml.safe_dump(config_to_data(config), sort_keys=False, default_flow_style=None)
    write_text_atomic(path, text)
