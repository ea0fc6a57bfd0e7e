"""Resolved cluster description: device types, devices, links. All figures in SI units.

These are the types every other package uses. The YAML file format (human units, catalog
names) lives in :mod:`hetplan.cluster.config` and resolves into these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hetplan.errors import InputError

# Default efficiency factors of the analytical roofline (overridable per device type).
# Sources: large conv/GEMM kernels reach 50-70% of peak on V100/A100 (NVIDIA Deep Learning
# Performance Guide, "GPU Performance Background"); whole-layer averages incl. small kernels
# are lower. STREAM-like kernels reach ~80-90% of spec memory bandwidth (NVIDIA tuning guides).
DEFAULT_COMPUTE_EFFICIENCY = 0.5  # dimensionless, achieved FLOP/s / peak FLOP/s
DEFAULT_MEMORY_EFFICIENCY = 0.8  # dimensionless, achieved bytes/s / spec bytes/s
# CUDA kernel launch + framework dispatch, ~5-10 us per op (PyTorch eager on GPUs; see
# "Making Deep Learning Go Brrrr From First Principles", He 2022, overhead section).
DEFAULT_KERNEL_OVERHEAD_S = 8e-6  # seconds per kernel
# Fixed cost of one collective call (negotiation, buffer set-up, launch), seconds. nccl-tests
# all_reduce_perf at 8 B - 1 KB takes ~6 us (2 H100, NVLS; NVIDIA/nccl#1259), ~25 us (NCCL's
# own tuning estimate on H100 nodes; NVIDIA/nccl#1453) and ~54 us (8 RTX 3090 on PCIe;
# NVIDIA/nccl#1439). Paper 003 (Horovod, MobileNetV2) finds this negotiation and buffer
# allocation dominates small allreduces. Used by cluster files that do not set it.
DEFAULT_COLLECTIVE_OVERHEAD_S = 30e-6


@dataclass(frozen=True, kw_only=True)
class DeviceType:
    """A kind of accelerator (or CPU) with its spec-sheet figures, in SI units."""

    name: str
    """Catalog name, e.g. ``V100-32GB``."""
    peak_flops: dict[str, float]
    """Peak dense FLOP/s per dtype (``fp32``, ``tf32``, ``fp16``, ``bf16``)."""
    memory_bandwidth: float
    """Device memory bandwidth, bytes/s."""
    memory_bytes: float
    """Device memory capacity, bytes."""
    idle_power_w: float
    """Power drawn when idle, watts."""
    max_power_w: float
    """Power at full load (TDP/TGP), watts."""
    price_per_hour: float | None = None
    """On-demand rental price, USD per hour, if known."""
    is_cpu: bool = False
    """A host CPU (ranks on it run on ``cpu``); every other type is a GPU (``cuda``)."""
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    """Achieved fraction of peak FLOP/s for a layer's compute-bound part."""
    memory_efficiency: float = DEFAULT_MEMORY_EFFICIENCY
    """Achieved fraction of memory bandwidth for a layer's memory-bound part."""
    kernel_overhead_s: float = DEFAULT_KERNEL_OVERHEAD_S
    """Fixed cost per kernel launch (dispatch), seconds."""
    source: str = ""
    """Where the figures come from (spec sheet)."""

    def flops(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; fp16/bf16 fall back to fp32 where the device lacks them."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        return self.peak_flops["fp32"]


@dataclass(frozen=True, kw_only=True)
class Link:
    """A communication channel: latency + size / bandwidth (one direction)."""

    kind: str
    """Catalog name or ``custom``."""
    bandwidth: float
    """Bytes per second, one direction."""
    latency_s: float
    """Seconds per message."""

    def transfer_s(self, nbytes: float) -> float:
        """Time to send ``nbytes`` over this link alone (alpha-beta model)."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + nbytes / self.bandwidth


@dataclass(frozen=True, kw_only=True)
class Device:
    """One device of the cluster."""

    id: str
    """Cluster-unique id, ``<node>.<index>`` (e.g. ``n0.3``)."""
    type: DeviceType
    node: str
    """Name of the node that hosts it."""
    index: int
    """Index within its node."""
    cpus: tuple[int, ...] | None = None
    """CPU cores to pin a local process to (CPU clusters only)."""
    speed: float = 1.0
    """Fraction of the device type's throughput this device gets (e.g. 0.5 for a process
    sharing one core with another). Scales compute time by 1/speed."""


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A resolved cluster: devices and the links between every pair."""

    name: str
    devices: tuple[Device, ...]
    intra_links: dict[str, Link]
    """Default link between two devices of the same node, by node name."""
    pair_links: dict[tuple[str, str], Link] = field(default_factory=dict)
    """Per-pair overrides, keyed by (device id, device id) sorted."""
    network: dict[str, Link] = field(default_factory=dict)
    """Each node's link to the inter-node network, by node name."""
    collective_overhead_s: float = 0.0
    """Fixed cost per collective call (negotiation, buffer set-up), seconds."""
    collective_step_s: float | None = None
    """The most latency one step of a collective sees on any link, seconds, measured from a
    collective over every device (``profile-links``); None: the links' own latencies."""
    collective_bandwidth: float | None = None
    """The most bandwidth one edge of a collective's step gets, bytes/s, measured the same way;
    None: the links' own. Both caps apply to every edge of a ring collective, the latency cap
    alone to gloo's reduce and broadcast (:meth:`collective_link`); point-to-point transfers
    keep the links' figures."""
    addresses: dict[str, str] = field(default_factory=dict)
    """Host name or IP address where each node is reachable, by node name (the nodes whose
    cluster file gives one)."""

    def address(self, node: str) -> str:
        """Where node ``node`` is reachable: its ``address``, else its name."""
        return self.addresses.get(node, node)

    _by_id: dict[str, Device] = field(init=False, repr=False, compare=False)
    _inter: dict[tuple[str, str], Link] = field(init=False, repr=False, compare=False)
    has_cpu: bool = field(init=False, repr=False, compare=False)
    """Whether any device is a CPU (:meth:`gloo` looks no further where none is)."""

    def __post_init__(self) -> None:
        # Precomputed lookups: the simulator calls device() and link() in hot loops.
        by_id: dict[str, Device] = {}
        for d in self.devices:
            if d.id in by_id:
                raise InputError(f"cluster {self.name!r}: duplicate device id {d.id!r}")
            by_id[d.id] = d
        object.__setattr__(self, "_by_id", by_id)
        object.__setattr__(self, "has_cpu", any(d.type.is_cpu for d in self.devices))
        # Inter-node links are made on first use: all pairs would be O(nodes^2).
        object.__setattr__(self, "_inter", {})

    def device(self, device_id: str) -> Device:
        """The device with id ``device_id`` (O(1))."""
        d = self._by_id.get(device_id)
        if d is None:
            known = ", ".join(d.id for d in self.devices)
            raise InputError(
                f"unknown device id {device_id!r} in cluster {self.name!r}; known: {known}"
            )
        return d

    @property
    def nodes(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for d in self.devices:
            seen.setdefault(d.node, None)
        return tuple(seen)

    def link(self, a: str, b: str) -> Link:
        """The link between devices ``a`` and ``b`` (``a != b``), in O(1).

        Inside a node: the pair override or the node's default. Between nodes: the pair
        override, else the slower of the two nodes' network links with the larger of their
        latencies (each is an end-to-end one-way figure, see ``links.py``).
        """
        key = (a, b) if a < b else (b, a)
        pair = self.pair_links.get(key)
        if pair is not None:
            return pair
        da, db = self.device(a), self.device(b)
        if da.node == db.node:
            intra = self.intra_links.get(da.node)
            if intra is None:
                raise InputError(f"cluster {self.name!r}: node {da.node!r} has no intra-node link")
            return intra
        inter = self._inter.get((da.node, db.node))
        if inter is None:
            inter = self._inter_link(da.node, db.node)
        return inter

    def collective_link(self, link: Link, *, capped_bandwidth: bool = True) -> Link:
        """``link`` as one step of a collective sees it: its latency capped at
        ``collective_step_s``, its bandwidth at ``collective_bandwidth``. CPU ranks that share
        a core answer a ping-pong a time slice late, but in a collective every rank is already
        waiting on its next step, so the measured step is far shorter than the pair figure;
        and every rank of a collective sends, receives and adds at once on its own core, so a
        step moves its bytes far slower than a ping-pong does (docs/cost-models.md §5.1,
        "gloo's calls"). ``capped_bandwidth=False``: the latency cap alone (gloo's reduce and
        broadcast, measured at the pairs' bandwidth)."""
        step = self.collective_step_s
        bandwidth = self.collective_bandwidth if capped_bandwidth else None
        latency = link.latency_s if step is None else min(link.latency_s, step)
        rate = link.bandwidth if bandwidth is None else min(link.bandwidth, bandwidth)
        if latency == link.latency_s and rate == link.bandwidth:
            return link
        return Link(kind=link.kind, bandwidth=rate, latency_s=latency)

    def gloo(self, devices: Sequence[str]) -> bool:
        """Whether a collective over ``devices`` runs on gloo: some of them are CPUs (the
        runtime takes NCCL only where every rank has a GPU,
        :func:`hetplan.run.launch.placement.job_backend`)."""
        return self.has_cpu and any(self.device(d).type.is_cpu for d in devices)

    @property
    def collective_capped(self) -> bool:
        """Whether a measured cap changes what a collective's steps see."""
        return self.collective_step_s is not None or self.collective_bandwidth is not None

    def collective_link_of(self, link: Link | None) -> Link | None:
        """:meth:`collective_link` of a link that may be missing (a one-device node)."""
        return None if link is None else self.collective_link(link)

    def _inter_link(self, na: str, nb: str) -> Link:
        la, lb = self.network.get(na), self.network.get(nb)
        if la is None or lb is None:
            missing = na if la is None else nb
            raise InputError(f"cluster {self.name!r}: node {missing!r} has no network link")
        slow = la if la.bandwidth <= lb.bandwidth else lb
        # Catalog latencies are end to end (NIC, switch, NIC); the slower side's figure
        # stands for the path, not the sum of both sides.
        lat = max(la.latency_s, lb.latency_s)
        link = Link(kind=slow.kind, bandwidth=slow.bandwidth, latency_s=lat)
        self._inter[(na, nb)] = link
        return link
