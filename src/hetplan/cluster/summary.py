"""Summary numbers of a cluster (what ``hetplan cluster show`` prints), in SI units.

Everything is computed per node and per device group, never per device or per device pair:
``cluster show`` of one node with ``count: 1000000`` is as quick as one with 8. The cost is
O(device groups + (nodes + pair overrides) log nodes) for a cluster file
(:func:`summarize_config`), and O(devices) more for a resolved :class:`Cluster`
(:func:`summarize`).

Links follow :meth:`Cluster.link`: a pair override, else the node's intra-node link inside a
node, else the slower of the two nodes' network links with the larger of their latencies. The
pair reported for an extreme is the first in device order (``a`` before ``b``, as
``itertools.combinations`` lists the pairs) whose link is that extreme.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hetplan.cluster.config import ClusterConfig, NodeConfig
from hetplan.cluster.resolve import PER_S, _lookup_type, _types, resolve_link
from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.errors import InputError
from hetplan.units import GB

MAX_DEVICES = 10**9
"""Most devices a cluster file may hold for ``cluster show`` (and ``cluster generate`` may
write): far beyond any machine built, and ``count x figure`` sums stay exact enough."""

MAX_LISTED_IDS = 100
"""An unknown-device-id error lists the known ids up to this many; beyond, their pattern."""

Key = tuple[float, float]
"""Order of links for one extreme: the smallest key is the extreme."""
Pos = tuple[int, int]
"""A device pair as positions in device order, first < second."""


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
    collective_step_s: float | None = None
    """The measured cap on a collective step's latency (None: the links' own)."""
    collective_bandwidth: float | None = None
    """The measured cap on a collective step's bandwidth, bytes/s (None: the links' own)."""


@dataclass(frozen=True, kw_only=True)
class _Group:
    """``count`` devices of one type and speed."""

    type: DeviceType
    count: int
    speed: float


@dataclass(frozen=True, kw_only=True)
class _Node:
    name: str
    start: int
    """Position of its first device in device order (a node's devices are consecutive)."""
    size: int
    groups: tuple[_Group, ...]
    intra: Link | None
    network: Link | None


@dataclass(frozen=True, kw_only=True)
class _Layout:
    """What the summary needs of a cluster: nodes, device groups and links, by position."""

    name: str
    nodes: tuple[_Node, ...]
    pairs: dict[Pos, Link]
    """Pair overrides."""
    device_id: Callable[[int], str]
    collective_overhead_s: float
    collective_step_s: float | None = None
    collective_bandwidth: float | None = None
    starts: list[int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", [n.start for n in self.nodes])

    @property
    def num_devices(self) -> int:
        return self.nodes[-1].start + self.nodes[-1].size if self.nodes else 0

    def node_of(self, pos: int) -> int:
        """Index of the node holding position ``pos``."""
        return bisect_right(self.starts, pos) - 1

    def link(self, i: int, j: int) -> Link:
        """The link between positions ``i < j``, as :meth:`Cluster.link` gives it."""
        pair = self.pairs.get((i, j))
        if pair is not None:
            return pair
        ni, nj = self.nodes[self.node_of(i)], self.nodes[self.node_of(j)]
        if ni is nj:
            assert ni.intra is not None  # _intra_candidate checked it
            return ni.intra
        la, lb = ni.network, nj.network
        assert la is not None and lb is not None  # _check_networks checked them
        slow = la if la.bandwidth <= lb.bandwidth else lb  # the earlier node's kind on a tie
        latency = max(la.latency_s, lb.latency_s)
        return Link(kind=slow.kind, bandwidth=slow.bandwidth, latency_s=latency)


# --- building a layout: from a resolved cluster or straight from a cluster file ------------


def _runs(devices: Sequence[Device]) -> tuple[_Group, ...]:
    """Consecutive devices of one type and speed as groups."""
    groups: list[_Group] = []
    for d in devices:
        last = groups[-1] if groups else None
        if last is not None and last.speed == d.speed and last.type == d.type:
            groups[-1] = _Group(type=last.type, count=last.count + 1, speed=last.speed)
        else:
            groups.append(_Group(type=d.type, count=1, speed=d.speed))
    return tuple(groups)


def _cluster_layout(cluster: Cluster) -> _Layout:
    """The layout of a resolved cluster, O(devices). A node's devices that are not
    consecutive in ``cluster.devices`` (never so from a file) are taken in node order."""
    by_node: dict[str, list[Device]] = {}
    for d in cluster.devices:
        by_node.setdefault(d.node, []).append(d)
    ordered = [d for devs in by_node.values() for d in devs]
    nodes: list[_Node] = []
    for name, devs in by_node.items():
        start = nodes[-1].start + nodes[-1].size if nodes else 0
        intra, net = cluster.intra_links.get(name), cluster.network.get(name)
        groups = _runs(devs)
        nodes.append(
            _Node(name=name, start=start, size=len(devs), groups=groups, intra=intra, network=net)
        )
    position = {d.id: p for p, d in enumerate(ordered)}
    pairs: dict[Pos, Link] = {}
    for (a, b), link in cluster.pair_links.items():
        if a < b and a in position and b in position:  # the only keys Cluster.link reads
            i, j = sorted((position[a], position[b]))
            pairs[(i, j)] = link
    return _Layout(
        name=cluster.name,
        nodes=tuple(nodes),
        pairs=pairs,
        device_id=lambda p: ordered[p].id,
        collective_overhead_s=cluster.collective_overhead_s,
        collective_step_s=cluster.collective_step_s,
        collective_bandwidth=cluster.collective_bandwidth,
    )


# The checks below are resolve_config's, on counts instead of devices, with its messages.


def _intra(node: NodeConfig, i: int, size: int, source: str) -> Link | None:
    if node.link is not None:
        return resolve_link(node.link)
    if size > 1:
        raise InputError(
            f"{source}: nodes.{i}.link: missing (node {node.name!r} has {size} "
            "devices; expected e.g. {type: NVLink2} or {bandwidth_GBps: 12, latency_us: 5})"
        )
    return None


def _node_pairs(node: NodeConfig, i: int, start: int, size: int, source: str) -> dict[Pos, Link]:
    pairs: dict[Pos, Link] = {}
    for p, pair in enumerate(node.pairs):
        a, b = pair.between
        if a == b or not (0 <= a < size and 0 <= b < size):
            raise InputError(
                f"{source}: nodes.{i}.pairs.{p}.between: expected two different device "
                f"indices in 0..{size - 1} (got [{a}, {b}])"
            )
        pairs[(start + min(a, b), start + max(a, b))] = resolve_link(pair.link)
    return pairs


def _position(nodes: dict[str, _Node], device_id: str) -> int | None:
    """Position of ``<node>.<index>`` (index written as ``str(int)``), None if no device."""
    name, _, index = device_id.rpartition(".")
    node = nodes.get(name)
    digits = index.isascii() and index.isdigit() and len(index) <= len(str(MAX_DEVICES))
    if node is None or not digits or str(int(index)) != index:
        return None
    return node.start + int(index) if int(index) < node.size else None


def _known_ids(nodes: Sequence[_Node]) -> str:
    total = nodes[-1].start + nodes[-1].size
    if total <= MAX_LISTED_IDS:
        return ", ".join(sorted(f"{n.name}.{k}" for n in nodes for k in range(n.size)))
    return f"{total:,} ids <node>.<index>, index below the node's device count"


def _top_pairs(config: ClusterConfig, nodes: Sequence[_Node], source: str) -> dict[Pos, Link]:
    by_name = {n.name: n for n in nodes}
    pairs: dict[Pos, Link] = {}
    for p, gpair in enumerate(config.pairs):
        a_id, b_id = gpair.between
        a, b = _position(by_name, a_id), _position(by_name, b_id)
        bad = [x for x, pos in ((a_id, a), (b_id, b)) if pos is None]
        if bad or a == b:
            what = f"unknown device id {bad[0]!r}" if bad else "the same device twice"
            raise InputError(
                f"{source}: pairs.{p}.between: {what}; expected two ids like "
                f"{nodes[0].name + '.0'!r} (known: {_known_ids(nodes)})"
            )
        assert a is not None and b is not None
        pairs[(min(a, b), max(a, b))] = resolve_link(gpair.link)
    return pairs


def _config_layout(config: ClusterConfig, source: str) -> _Layout:
    """The layout of a validated cluster file, checked as :func:`resolve_config` checks it
    (same errors), without making its devices."""
    types = _types(config, source)
    nodes: list[_Node] = []
    pairs: dict[Pos, Link] = {}
    start = 0
    for i, node in enumerate(config.nodes):
        groups = tuple(
            _Group(
                type=_lookup_type(g.type, types, f"{source}: nodes.{i}.devices.{j}.type"),
                count=g.count,
                speed=g.speed,
            )
            for j, g in enumerate(node.devices)
        )
        size = sum(g.count for g in groups)
        if start + size > MAX_DEVICES:
            raise InputError(
                f"{source}: nodes.{i}.devices: {start + size:,} devices up to node "
                f"{node.name!r}; expected at most {MAX_DEVICES:,} in a cluster"
            )
        intra = _intra(node, i, size, source)
        pairs.update(_node_pairs(node, i, start, size, source))
        net = node.network if node.network is not None else config.network
        if net is None and len(config.nodes) > 1:
            raise InputError(
                f"{source}: network: missing (cluster has {len(config.nodes)} nodes and node "
                f"{node.name!r} sets no network; expected e.g. {{type: 10GbE}})"
            )
        network = resolve_link(net) if net is not None else None
        nodes.append(
            _Node(
                name=node.name, start=start, size=size, groups=groups, intra=intra, network=network
            )
        )
        start += size
    pairs.update(_top_pairs(config, nodes, source))
    by_start = [n.start for n in nodes]

    def device_id(pos: int) -> str:
        node = nodes[bisect_right(by_start, pos) - 1]
        return f"{node.name}.{pos - node.start}"

    return _Layout(
        name=config.name,
        nodes=tuple(nodes),
        pairs=pairs,
        device_id=device_id,
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
    )


# --- the extreme links, without enumerating device pairs -----------------------------------

KeyFn = Callable[[float, float], Key]
"""(bandwidth, latency) -> key; the smallest key is the extreme."""
Candidate = tuple[Key, Pos]
"""The best key of one kind of pair (override, intra-node, inter-node) and its first pair."""
Figures = tuple[float, float]
"""(bandwidth, latency) of a link."""


def _slow_key(bandwidth: float, latency_s: float) -> Key:
    return (bandwidth, -latency_s)


def _fast_key(bandwidth: float, latency_s: float) -> Key:
    return (-bandwidth, latency_s)


def _figures(a: Link, b: Link) -> Figures:
    """Bandwidth and latency of the path between two nodes with network links ``a``, ``b``."""
    return min(a.bandwidth, b.bandwidth), max(a.latency_s, b.latency_s)


@dataclass(frozen=True, kw_only=True)
class _Overrides:
    """Where the pair overrides fall: each takes a device pair from a default link."""

    within: Counter[int]
    """Overrides inside node k."""
    across: Counter[int]
    """Overrides between node k and another node."""
    between: Counter[Pos]
    """Overrides between nodes k < m."""
    full: list[Pos]
    """Node pairs k < m whose every device pair is overridden."""


def _overrides(layout: _Layout) -> _Overrides:
    within: Counter[int] = Counter()
    across: Counter[int] = Counter()
    between: Counter[Pos] = Counter()
    for i, j in layout.pairs:
        k, m = layout.node_of(i), layout.node_of(j)
        if k == m:
            within[k] += 1
        else:
            across[k] += 1
            across[m] += 1
            between[(k, m)] += 1
    size = [n.size for n in layout.nodes]
    full = [(k, m) for (k, m), c in between.items() if c == size[k] * size[m]]
    return _Overrides(within=within, across=across, between=between, full=full)


def _override_candidate(layout: _Layout, key: KeyFn) -> Candidate | None:
    if not layout.pairs:
        return None
    keyed = [(key(link.bandwidth, link.latency_s), pos) for pos, link in layout.pairs.items()]
    best = min(k for k, _ in keyed)
    return best, min(pos for k, pos in keyed if k == best)


def _first_within(layout: _Layout, node: _Node) -> Pos:
    """The first pair of ``node`` without an override (visits at most its overrides + 1)."""
    end = node.start + node.size
    for i in range(node.start, end):
        for j in range(i + 1, end):
            if (i, j) not in layout.pairs:
                return i, j
    raise AssertionError(f"node {node.name!r} has no pair without an override")


def _intra_candidate(layout: _Layout, over: _Overrides, key: KeyFn) -> Candidate | None:
    best: tuple[Key, _Node] | None = None
    for k, node in enumerate(layout.nodes):
        if _pairs(node.size) <= over.within[k]:
            continue  # one device, or every pair overridden: the node's link is not used
        if node.intra is None:
            raise InputError(f"cluster {layout.name!r}: node {node.name!r} has no intra-node link")
        node_key = key(node.intra.bandwidth, node.intra.latency_s)
        if best is None or node_key < best[0]:  # on a tie, the earlier node's pairs come first
            best = (node_key, node)
    return None if best is None else (best[0], _first_within(layout, best[1]))


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


def _slowest_figures(nets: Sequence[Link]) -> Figures:
    """The slowest node pair: the lowest bandwidth of any node (a pair runs at its slower
    side) and the highest latency of any node (two nodes always pair up to have both)."""
    return min(n.bandwidth for n in nets), max(n.latency_s for n in nets)


def _fastest_figures(nets: Sequence[Link]) -> Figures:
    """The fastest node pair: the second-highest bandwidth (a pair runs at its slower side)
    and, among the nodes at least that fast, the second-lowest latency."""
    bandwidth = sorted((n.bandwidth for n in nets), reverse=True)[1]
    latency = sorted(n.latency_s for n in nets if n.bandwidth >= bandwidth)[1]
    return bandwidth, latency


def _count_node_pairs(nets: Sequence[Link], figures: Figures) -> int:
    """Node pairs whose path has exactly ``figures``: within the nodes at least that good,
    the pairs with a node of that bandwidth and a node of that latency (inclusion-exclusion)."""
    bandwidth, latency = figures
    fit = [n for n in nets if n.bandwidth >= bandwidth and n.latency_s <= latency]
    slow = sum(1 for n in fit if n.bandwidth == bandwidth)
    late = sum(1 for n in fit if n.latency_s == latency)
    both = sum(1 for n in fit if n.bandwidth == bandwidth and n.latency_s == latency)
    s = len(fit)
    return _pairs(s) - _pairs(s - slow) - _pairs(s - late) + _pairs(s - slow - late + both)


def _best_by_class(nets: dict[int, Link], full: Sequence[Pos], key: KeyFn) -> Figures:
    """The best figures of a node pair that keeps a default device pair, over pairs of
    distinct network links: O(distinct links^2). Needed only when overrides cover every
    device pair of every node pair with the best figures."""
    classes = Counter((n.bandwidth, n.latency_s) for n in nets.values())
    gone: Counter[tuple[Figures, Figures]] = Counter()
    for k, m in full:
        ck, cl = (nets[k].bandwidth, nets[k].latency_s), (nets[m].bandwidth, nets[m].latency_s)
        gone[(min(ck, cl), max(ck, cl))] += 1
    ordered = sorted(classes)
    kept = [
        (min(cx[0], cy[0]), max(cx[1], cy[1]))
        for x, cx in enumerate(ordered)
        for cy in ordered[x:]
        if (_pairs(classes[cx]) if cx == cy else classes[cx] * classes[cy]) > gone[(cx, cy)]
    ]
    return min(kept, key=lambda f: key(*f))


def _first_between(layout: _Layout, nets: dict[int, Link], figures: Figures) -> Pos:
    """The first device pair in device order between two nodes whose path has ``figures``
    and no override: O(nodes log nodes + overrides visited)."""
    bandwidth, latency = figures
    fit = [k for k, n in nets.items() if n.bandwidth >= bandwidth and n.latency_s <= latency]
    slow = [k for k in fit if nets[k].bandwidth == bandwidth]
    late = [k for k in fit if nets[k].latency_s == latency]
    both = [k for k in slow if nets[k].latency_s == latency]
    for k in fit:  # node order, so device order of the pairs' first devices
        # A path has the figures when one side brings the bandwidth and one the latency.
        is_slow, is_late = nets[k].bandwidth == bandwidth, nets[k].latency_s == latency
        partners = fit if is_slow and is_late else late if is_slow else slow if is_late else both
        first = bisect_right(partners, k)
        if first == len(partners):
            continue
        node = layout.nodes[k]
        for i in range(node.start, node.start + node.size):
            for p in range(first, len(partners)):  # each pair visited but the last is overridden
                other = layout.nodes[partners[p]]
                for j in range(other.start, other.start + other.size):
                    if (i, j) not in layout.pairs:
                        return i, j
    raise AssertionError(f"no node pair with {figures} keeps a default device pair")


def _inter_candidate(layout: _Layout, over: _Overrides, slowest: bool) -> Candidate | None:
    total = layout.num_devices
    for k, node in enumerate(layout.nodes):
        if node.network is None and node.size * (total - node.size) > over.across[k]:
            raise InputError(f"cluster {layout.name!r}: node {node.name!r} has no network link")
    # Nodes without a network link have all their pairs to other nodes overridden.
    nets = {k: n.network for k, n in enumerate(layout.nodes) if n.network is not None}
    size = sum(layout.nodes[k].size for k in nets)
    pairs = (size * size - sum(layout.nodes[k].size ** 2 for k in nets)) // 2
    if pairs <= sum(c for (k, m), c in over.between.items() if k in nets and m in nets):
        return None  # no node pairs, or every device pair between nodes is overridden
    key = _slow_key if slowest else _fast_key
    links = list(nets.values())
    figures = _slowest_figures(links) if slowest else _fastest_figures(links)
    full = [(k, m) for k, m in over.full if k in nets and m in nets]
    if _count_node_pairs(links, figures) <= sum(
        1 for k, m in full if _figures(nets[k], nets[m]) == figures
    ):
        figures = _best_by_class(nets, full, key)
    return key(*figures), _first_between(layout, nets, figures)


def _extreme(layout: _Layout, over: _Overrides, slowest: bool) -> PairLink:
    """The slowest (or fastest) pair: the best of the three kinds' candidates, and on a tie
    the first pair in device order."""
    key = _slow_key if slowest else _fast_key
    found = [
        c
        for c in (
            _override_candidate(layout, key),
            _intra_candidate(layout, over, key),
            _inter_candidate(layout, over, slowest),
        )
        if c is not None
    ]
    best = min(k for k, _ in found)
    i, j = min(pos for k, pos in found if k == best)
    link = layout.link(i, j)
    return PairLink(
        a=layout.device_id(i),
        b=layout.device_id(j),
        kind=link.kind,
        bandwidth=link.bandwidth,
        latency_s=link.latency_s,
    )


# --- the summary -----------------------------------------------------------------------------


def _node_summary(node: _Node) -> NodeSummary:
    counts: dict[str, int] = {}
    for g in node.groups:
        counts[g.type.name] = counts.get(g.type.name, 0) + g.count
    return NodeSummary(
        name=node.name,
        devices=counts,
        intra_link=node.intra.kind if node.intra is not None else None,
        network=node.network.kind if node.network is not None else None,
    )


def _summary(layout: _Layout) -> ClusterSummary:
    groups = [g for node in layout.nodes for g in node.groups]
    counts: dict[str, int] = {}
    for g in groups:
        counts[g.type.name] = counts.get(g.type.name, 0) + g.count
    slow = fast = None
    if layout.num_devices > 1:
        over = _overrides(layout)
        slow, fast = _extreme(layout, over, slowest=True), _extreme(layout, over, slowest=False)
    return ClusterSummary(
        name=layout.name,
        num_devices=layout.num_devices,
        nodes=[_node_summary(node) for node in layout.nodes],
        device_counts=counts,
        # count x per-device figure: the per-device sum up to rounding (a few ulps).
        total_memory_bytes=sum(g.count * g.type.memory_bytes for g in groups),
        total_fp32_flops=sum(g.count * (g.type.flops("fp32") * g.speed) for g in groups),
        total_fp16_flops=sum(g.count * (g.type.flops("fp16") * g.speed) for g in groups),
        slowest_link=slow,
        fastest_link=fast,
        collective_overhead_s=layout.collective_overhead_s,
        collective_step_s=layout.collective_step_s,
        collective_bandwidth=layout.collective_bandwidth,
    )


def summarize(cluster: Cluster) -> ClusterSummary:
    """Counts, totals and the extreme links of a resolved cluster, O(devices + overrides)."""
    return _summary(_cluster_layout(cluster))


def summarize_config(config: ClusterConfig, source: str) -> ClusterSummary:
    """The same summary straight from a cluster file, without making its devices (see the
    module's cost). Errors are those of :func:`~hetplan.cluster.config.load_cluster`
    (naming ``source``), plus a cluster of more than :data:`MAX_DEVICES` devices."""
    return _summary(_config_layout(config, source))
