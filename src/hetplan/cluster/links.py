"""Link catalog: interconnects between two devices, one direction, in SI units.

Each entry has a line rate (what the standard promises per direction), a named efficiency
(the fraction a bulk transfer achieves) and a per-message latency. The effective bandwidth
used by the cost models is ``line_rate * efficiency``. These are defaults; ``hetplan
profile-links`` measures the real figures and writes them into the cluster file.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetplan.cluster.spec import Link
from hetplan.errors import InputError
from hetplan.units import GB, gbit_per_s

# Achieved / line-rate bandwidth of a bulk transfer (dimensionless).
# NVLink: p2pBandwidthLatencyTest (CUDA samples) unidirectional P2P on NVLink pairs reaches
# ~90-96% of the link rate; we take the low end.
NVLINK_EFFICIENCY = 0.9
# PCIe: pinned cudaMemcpy (CUDA bandwidthTest) reaches ~12-13 GB/s of 15.75 GB/s on PCIe 3.0
# x16 (TLP header and flow-control overhead), i.e. ~0.8; same ratio assumed for gen 4/5.
PCIE_EFFICIENCY = 0.8
# Ethernet: TCP goodput with 1500-byte MTU is ~94% of line rate (iperf on 1GbE: ~941 Mbit/s;
# 1460 payload bytes per 1538 bytes on the wire).
ETHERNET_EFFICIENCY = 0.94
# InfiniBand: ib_write_bw reaches ~95% of the data rate (EDR ~11.9 of 12.5 GB/s).
INFINIBAND_EFFICIENCY = 0.95
# Processes on one host (gloo over TCP loopback / shared memory): rough default, no line rate.
SHM_EFFICIENCY = 1.0

# Per-message one-way latencies, seconds.
# p2pBandwidthLatencyTest GPU-GPU P2P write latency: ~2 us over NVLink, ~5 us over PCIe.
NVLINK_LATENCY_S = 2e-6
PCIE_LATENCY_S = 5e-6
# Small gloo message between processes on one host, one way: about half a loopback TCP round
# trip of ~40 us (rough). `hetplan profile-links` measured 0.35-1.25 ms on the loaded 2-core
# development machine (see examples/clusters/local-cpu*.yaml): measure real hosts.
SHM_LATENCY_S = 20e-6
# Kernel TCP one-way latency, about half a LAN ping round trip (~100 us on 1GbE, ~40 us on
# 10GbE, ~20 us with 25-100GbE NICs).
ETH1_LATENCY_S = 50e-6
ETH10_LATENCY_S = 20e-6
ETH_FAST_LATENCY_S = 10e-6
# RDMA one-way latency, ib_write_lat: ~1 us end to end through one switch.
IB_LATENCY_S = 1e-6


@dataclass(frozen=True, kw_only=True)
class LinkType:
    """A catalog interconnect."""

    name: str
    line_rate: float
    """Bytes/s one direction as the standard quotes it."""
    efficiency: float
    """Achieved fraction of ``line_rate`` for bulk transfers."""
    latency_s: float
    """Seconds per message, one way."""
    source: str
    """Where the figures come from, and what wiring is assumed."""

    @property
    def bandwidth(self) -> float:
        """Effective bytes/s, one direction."""
        return self.line_rate * self.efficiency

    def to_link(self) -> Link:
        """The resolved :class:`Link` with the effective bandwidth."""
        return Link(kind=self.name, bandwidth=self.bandwidth, latency_s=self.latency_s)


def _nv(name: str, gbytes: float, note: str) -> LinkType:
    return LinkType(
        name=name,
        line_rate=gbytes * GB,
        efficiency=NVLINK_EFFICIENCY,
        latency_s=NVLINK_LATENCY_S,
        source=note,
    )


def _pcie(name: str, gbytes: float, note: str) -> LinkType:
    return LinkType(
        name=name,
        line_rate=gbytes * GB,
        efficiency=PCIE_EFFICIENCY,
        latency_s=PCIE_LATENCY_S,
        source=note,
    )


def _eth(gbit: int, latency_s: float) -> LinkType:
    return LinkType(
        name=f"{gbit}GbE",
        line_rate=gbit_per_s(gbit),
        efficiency=ETHERNET_EFFICIENCY,
        latency_s=latency_s,
        source=f"IEEE 802.3 {gbit} Gbit/s Ethernet line rate, TCP goodput",
    )


def _ib(name: str, gbit: int) -> LinkType:
    return LinkType(
        name=name,
        line_rate=gbit_per_s(gbit),
        efficiency=INFINIBAND_EFFICIENCY,
        latency_s=IB_LATENCY_S,
        source=f"InfiniBand {name} 4x port data rate {gbit} Gbit/s (IBTA roadmap)",
    )


_ENTRIES = [
    # NVLink 1 (P100 whitepaper 2016): 20 GB/s per direction per link; DGX-1 (P100) wires one
    # link between a GPU pair.
    _nv("NVLink1", 20, "P100 whitepaper 2016: 20 GB/s/dir per link, 1 link per pair (DGX-1)"),
    # NVLink 2 (V100 whitepaper 2017): 25 GB/s per direction per link; 4-GPU SXM2 boards wire
    # two links per pair (nvidia-smi topo "NV2", github.com/NVIDIA/nccl-tests/issues/68).
    _nv("NVLink2", 50, "V100 whitepaper 2017: 25 GB/s/dir per link, 2 links per pair (NV2)"),
    # NVLink 3 (A100 datasheet 2021): 12 links, 600 GB/s bidirectional per GPU through
    # NVSwitch (DGX/HGX A100), so a pair gets 300 GB/s per direction.
    _nv("NVLink3", 300, "A100 datasheet 2021: 600 GB/s bidirectional per GPU via NVSwitch"),
    # NVLink 4 (H100 datasheet 2023): 18 links, 900 GB/s bidirectional per GPU via NVSwitch.
    _nv("NVLink4", 450, "H100 datasheet 2023: 900 GB/s bidirectional per GPU via NVSwitch"),
    # PCIe x16 per direction after 128b/130b encoding (PCI-SIG base specs 3.0/4.0/5.0).
    _pcie("PCIe3x16", 15.75, "PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 (PCI-SIG)"),
    _pcie("PCIe4x16", 31.5, "PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 (PCI-SIG)"),
    _pcie("PCIe5x16", 63.0, "PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 (PCI-SIG)"),
    LinkType(
        name="shm",
        # Single-stream TCP loopback (iperf3) reaches ~20-40 Gbit/s on current x86 hosts; gloo
        # between local processes goes through it. 4 GB/s is a rough default.
        line_rate=4 * GB,
        efficiency=SHM_EFFICIENCY,
        latency_s=SHM_LATENCY_S,
        source="rough default for processes on one host (TCP loopback, iperf3 ~32 Gbit/s)",
    ),
    _eth(1, ETH1_LATENCY_S),
    _eth(10, ETH10_LATENCY_S),
    _eth(25, ETH_FAST_LATENCY_S),
    _eth(40, ETH_FAST_LATENCY_S),
    _eth(100, ETH_FAST_LATENCY_S),
    _ib("EDR", 100),
    _ib("HDR", 200),
    _ib("NDR", 400),
]

LINK_CATALOG: dict[str, LinkType] = {lt.name: lt for lt in _ENTRIES}
"""Catalog link types by canonical name."""

_BY_LOWER = {name.lower(): lt for name, lt in LINK_CATALOG.items()}


def link_type(name: str) -> LinkType:
    """The catalog link called ``name`` (case-insensitive)."""
    lt = _BY_LOWER.get(name.lower())
    if lt is None:
        raise InputError(f"unknown link type {name!r}; known: {', '.join(LINK_CATALOG)}")
    return lt
