"""Generated cluster files: N nodes of M devices per catalog type, all on one network.

``hetplan cluster generate --nodes A100-80GB:32,T4:16 --per-node 8`` writes what
:func:`generate_config` returns; the config is the file format, so the result loads, resolves
and exports like a hand-written cluster file.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.cluster.catalog import DEVICE_CATALOG, catalog_name
from hetplan.cluster.config import ClusterConfig, DeviceGroupConfig, LinkConfig, NodeConfig
from hetplan.cluster.links import link_type
from hetplan.cluster.summary import MAX_DEVICES
from hetplan.errors import InputError

MAX_NODES = 100_000
"""Most nodes :func:`generate_config` writes: ~8 x the largest GPU clusters built so far
(about 100,000 GPUs in 8-GPU hosts), and a YAML file that still parses in tens of seconds."""

INTRA_LINKS: dict[str, str] = {
    # SXM boards wire their GPUs with NVLink: V100-SXM2 (NV2 pairs), A100-SXM4 (NVLink 3 via
    # NVSwitch), H100-SXM5 (NVLink 4 via NVSwitch); see the link catalog for the figures.
    "V100-16GB": "NVLink2",
    "V100-32GB": "NVLink2",
    "A100-40GB": "NVLink3",
    "A100-80GB": "NVLink3",
    "H100-SXM": "NVLink4",
    "GH200": "NVLink4",  # four superchips a node, NVLink 4 between their GPUs
    # PCIe cards talk over the host bus at their own generation (vendor spec sheets):
    "H100-PCIe": "PCIe5x16",  # PCIe Gen5 x16
    "RTX3090": "PCIe4x16",  # Ampere GeForce: Gen4
    "RTX4090": "PCIe4x16",  # Ada GeForce: Gen4
    "L4": "PCIe4x16",
    "A10G": "PCIe4x16",
    "T4": "PCIe3x16",
    "P100": "PCIe3x16",
    "P40": "PCIe3x16",
    "TitanRTX": "PCIe3x16",
    "RTX2080-Ti": "PCIe3x16",
    "GTX1050": "PCIe3x16",
    # Processes on one host talk through the loopback (as the example CPU clusters do).
    "cpu": "shm",
}
"""Intra-node link of a generated node, by catalog device type."""

DEFAULT_INTRA_LINK = "PCIe4x16"
"""Intra-node link of types missing from :data:`INTRA_LINKS` (e.g. the Jetson modules, which
have no multi-GPU host): a current PCIe host bus."""


def intra_link(device_type: str) -> str:
    """The intra-node link kind :func:`generate_config` gives a node of ``device_type``."""
    return INTRA_LINKS.get(device_type, DEFAULT_INTRA_LINK)


def _canonical_types(node_types: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Catalog names with their node counts; InputError naming a bad entry."""
    if not node_types:
        raise InputError("--nodes: expected at least one TYPE:COUNT (e.g. A100-80GB:4)")
    out: list[tuple[str, int]] = []
    for name, count in node_types:
        canonical = catalog_name(name)
        if canonical is None:
            known = ", ".join(DEVICE_CATALOG)
            raise InputError(f"--nodes: unknown device type {name!r}; known: {known}")
        if count < 1:
            raise InputError(f"--nodes: {name}:{count}: expected a node count >= 1")
        if any(seen == canonical for seen, _ in out):
            # Node names are <type>-<i>: a second entry would repeat them.
            raise InputError(f"--nodes: {canonical} appears twice; give each type once")
        out.append((canonical, count))
    return out


def _check_size(types: list[tuple[str, int]], per_node: int) -> None:
    if per_node < 1:
        raise InputError(f"--per-node: expected an integer >= 1 (got {per_node})")
    nodes = sum(count for _, count in types)
    if nodes > MAX_NODES:
        raise InputError(f"--nodes: {nodes:,} nodes; expected at most {MAX_NODES:,}")
    if nodes * per_node > MAX_DEVICES:
        raise InputError(
            f"--per-node: {nodes:,} nodes x {per_node:,} = {nodes * per_node:,} devices; "
            f"expected at most {MAX_DEVICES:,}"
        )


def generate_config(
    node_types: Sequence[tuple[str, int]],
    *,
    per_node: int = 8,
    network: str = "100GbE",
    name: str | None = None,
) -> ClusterConfig:
    """A cluster of, per ``(catalog type, node count)``, that many nodes of ``per_node``
    devices of the type, each node with the type's :func:`intra_link`, all on ``network``.

    Node names are ``<type lower>-<i>`` (``a100-80gb-0``); ``name`` defaults to
    ``generated-<devices>``. Bad input raises :class:`InputError` naming the CLI option.
    """
    types = _canonical_types(node_types)
    _check_size(types, per_node)
    try:
        net = link_type(network).name
    except InputError as err:
        raise InputError(f"--network: {err}") from None
    nodes = [
        NodeConfig(
            name=f"{dtype.lower()}-{i}",
            devices=[DeviceGroupConfig(type=dtype, count=per_node)],
            # A lone device has no partner in its node: no intra-node link to name.
            link=LinkConfig(type=intra_link(dtype)) if per_node > 1 else None,
        )
        for dtype, count in types
        for i in range(count)
    ]
    total = len(nodes) * per_node
    return ClusterConfig(
        name=name if name is not None else f"generated-{total}",
        nodes=nodes,
        network=LinkConfig(type=net),
    )
