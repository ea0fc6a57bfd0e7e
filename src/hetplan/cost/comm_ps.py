"""Parameter-server synchronisation: shard assignment, link sharing, gRPC serialisation.

The model follows paper 000 ("communication models for parameter servers"): the traffic of
each PS shard is computed from the real assignment of tensors to shards (load imbalance),
concurrent transfers on a shared resource (a node's NIC, a device's link) slow each other
down, and serialisation/deserialisation runs on CPU cores concurrently with the transfers.

Every worker exchanges every shard, but a resource's load only depends on how many workers
and shard bytes sit on each node and device, so the model sums by node and device: a call
costs O(workers + shards + pair overrides), not O(workers x shards) (the planner prices
hundreds of PS candidates over up to ~1,000 co-located workers and shards).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from hetplan.cluster.spec import Cluster, Link
from hetplan.errors import InputError

POLICIES = ("round_robin", "size")
# TensorFlow's gRPC runtime sends tensors with a pool of threads; "the default value of the
# number of gRPC threads in TensorFlow is 8" (paper 000, Methodology).
GRPC_THREADS = 8  # concurrent messages per (worker, shard) pair
# Per-core protobuf (de)serialisation throughput of tensor payloads. Estimate: a copy-bound
# encode/decode runs at ~1-4 GB/s per core on server CPUs; calibrate with a profile.
SERIALIZE_BANDWIDTH = 2e9  # bytes/s per core
# Busy times this close to the busiest count as a tie for naming the bottleneck: sums taken
# in another order differ in the last bits, and a tie goes to the first resource charged.
_TIE_REL = 1e-12


def assign_ps_shards(tensor_bytes: Sequence[int], shards: int, policy: str) -> list[list[int]]:
    """Tensor indices held by each of ``shards`` parameter-server shards.

    - ``round_robin``: tensor ``i`` on shard ``i mod shards``: TensorFlow's default
      ``replica_device_setter`` (``_RoundRobinStrategy`` over variables in creation order).
    - ``size``: each tensor, in creation order, goes to the shard with the fewest bytes so
      far (ties: lowest index): TensorFlow's ``GreedyLoadBalancingStrategy`` with
      ``byte_size_load_fn``, the byte-balanced placement MXNet's kvstore also aims at.
    One huge tensor still loads one shard fully under both (paper 000: Overfeat).
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if policy not in POLICIES:
        raise ValueError(f"unknown PS assignment policy {policy!r}; expected one of {POLICIES}")
    out: list[list[int]] = [[] for _ in range(shards)]
    if policy == "round_robin":
        for i in range(len(tensor_bytes)):
            out[i % shards].append(i)
        return out
    # (load, index) pairs: the heap's top is the least loaded shard, lowest index on a tie.
    heap = [(0, s) for s in range(shards)]  # sorted, hence already a heap
    for i, nbytes in enumerate(tensor_bytes):
        load, s = heap[0]
        out[s].append(i)
        heapq.heapreplace(heap, (load + int(nbytes), s))
    return out


@dataclass(frozen=True, kw_only=True)
class PsTiming:
    """Synchronisation time of one iteration with parameter servers."""

    sync_s: float
    """BSP: from the first push until the last worker has pulled (max of per_worker_s)."""
    per_worker_s: dict[str, float]
    """BSP: time until each worker has its new parameters (all pushes, then its pulls)."""
    push_s: float
    """Push phase (gradients to shards), bounded by the most loaded resource."""
    pull_s: float
    """Pull phase (parameters back to all workers), bounded by its most loaded resource."""
    bottleneck: str
    """The resource that bounds the push phase, e.g. ``nic_rx:n1`` or ``cpu:n0.0``."""
    shard_bytes: tuple[int, ...]
    """Bytes held by each shard (the load imbalance)."""
    async_per_worker_s: dict[str, float] = field(default_factory=dict)
    """Asynchronous PS: a worker's own push + pull, without waiting for (or contending with)
    the other workers; the simulator adds contention by overlapping them."""


class _Host(NamedTuple):
    """The nonzero shards one device holds (a zero-byte shard moves nothing)."""

    nbytes: int
    rounds: int
    """The most latency rounds any one of its shards takes."""
    first: int
    """Index of its first nonzero shard: the order transfers are listed in, for ties."""


class _View(NamedTuple):
    """How one worker reaches the shards."""

    node: str
    pairs: dict[str, Link]
    """Shard hosts it reaches over a pair override, and those links."""
    cross: int
    """Bytes it exchanges through the NICs (shards on other nodes, no override)."""
    intra: int
    """Bytes it exchanges over its node's default link (other devices of its node)."""
    touched: dict[str, int]
    """Other nodes -> bytes of its override partners there (not through the NICs)."""


class _Ranked:
    """Values largest first; ``top`` walks past the few excluded keys."""

    __slots__ = ("_items",)

    def __init__(self, values: Mapping[str, float]) -> None:
        self._items = sorted(((v, k) for k, v in values.items()), reverse=True)

    def top(self, excluded: Collection[str] = ()) -> float:
        for v, k in self._items:
            if k not in excluded:
                return v
        return 0.0


def _hosts(
    ps_devices: Sequence[str], shard_bytes: Sequence[int], rounds: Sequence[int]
) -> dict[str, _Host]:
    out: dict[str, _Host] = {}
    for j, (dev, nbytes, r) in enumerate(zip(ps_devices, shard_bytes, rounds, strict=True)):
        if nbytes <= 0:
            continue
        h = out.get(dev)
        out[dev] = (
            _Host(nbytes, r, j)
            if h is None
            else h._replace(nbytes=h.nbytes + nbytes, rounds=max(h.rounds, r))
        )
    return out


def _overrides(
    cluster: Cluster, workers: Collection[str], hosts: Collection[str]
) -> dict[str, dict[str, Link]]:
    """Worker -> {shard host: pair link} for the (worker, host) pairs with an override."""
    out: dict[str, dict[str, Link]] = defaultdict(dict)
    for (a, b), link in cluster.pair_links.items():
        if not a < b:  # lookups use the sorted key: any other key never matches
            continue
        if a in workers and b in hosts:
            out[a][b] = link
        if b in workers and a in hosts:
            out[b][a] = link
    return out


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for x in items:
        out[x] += 1
    return out


class _Traffic:
    """Busy time of every resource while all workers push all shards, summed by node/device.

    Attributes are named for the push phase. The pull phase moves the same bytes over the
    same links the other way, so it has the same busy times with tx and rx swapped:
    push ``nic_tx:n``, ``nic_rx:m``, ``link_tx:w``, ``link_rx:p`` are pull ``nic_rx:n``,
    ``nic_tx:m``, ``link_rx:w``, ``link_tx:p``; a worker's pull ends when its push would.
    """

    def __init__(
        self, workers: Sequence[str], hosts: dict[str, _Host], cluster: Cluster, cpu_bw: float
    ) -> None:
        self.cluster, self.hosts, self.cpu_bw = cluster, hosts, cpu_bw
        self.first: dict[str, int] = {}
        for i, w in enumerate(workers):
            self.first.setdefault(w, i)
        self.mult = _count(workers)
        self.total = sum(h.nbytes for h in hosts.values())
        devices = list({**self.first, **hosts})
        # One device alone only copies locally: no node to look up (nor did the old model).
        self.node = (
            {d: cluster.device(d).node for d in devices}
            if len(devices) > 1
            else dict.fromkeys(devices, "")
        )
        self.workers_on: dict[str, list[str]] = defaultdict(list)  # first occurrence order
        for w in self.first:
            self.workers_on[self.node[w]].append(w)
        self.hosts_on: dict[str, list[str]] = defaultdict(list)  # first shard order
        self.node_bytes: dict[str, int] = defaultdict(int)
        self.node_rounds: dict[str, int] = defaultdict(int)
        for p, h in hosts.items():
            n = self.node[p]
            self.hosts_on[n].append(p)
            self.node_bytes[n] += h.nbytes
            self.node_rounds[n] = max(self.node_rounds[n], h.rounds)
        self.pairs = _overrides(cluster, self.first, hosts)
        self.partners: dict[str, list[str]] = defaultdict(list)  # host -> override workers
        for w, ps in self.pairs.items():
            for p in ps:
                self.partners[p].append(w)
        self._sum_busy(len(workers))
        self.views = {w: self._view(w) for w in self.first}
        self._rank()

    def _held(self, device: str) -> int:
        h = self.hosts.get(device)
        return 0 if h is None else h.nbytes

    def _network(self, node: str) -> Link:
        link = self.cluster.network.get(node)
        if link is None:
            raise InputError(f"cluster {self.cluster.name!r}: node {node!r} has no network link")
        return link

    def _intra(self, node: str) -> Link:
        link = self.cluster.intra_links.get(node)
        if link is None:
            raise InputError(f"cluster {self.cluster.name!r}: node {node!r} has no intra-node link")
        return link

    def _sum_busy(self, n_workers: int) -> None:
        """Bytes per resource in integers (exact), then one division by its bandwidth."""
        per_node: dict[str, int] = defaultdict(int)
        for w, k in self.mult.items():
            per_node[self.node[w]] += k
        # Every worker sends every off-node shard through its NIC, every shard host
        # receives its bytes from each worker of another node; inside a node, over links.
        nic_w = {n: k * (self.total - self.node_bytes.get(n, 0)) for n, k in per_node.items()}
        nic_h = {m: b * (n_workers - per_node.get(m, 0)) for m, b in self.node_bytes.items()}
        link_w = {
            w: k * (self.node_bytes.get(self.node[w], 0) - self._held(w))
            for w, k in self.mult.items()
        }
        link_h = {
            p: h.nbytes * (per_node.get(self.node[p], 0) - self.mult.get(p, 0))
            for p, h in self.hosts.items()
        }
        extra_w: dict[str, float] = defaultdict(float)
        extra_h: dict[str, float] = defaultdict(float)
        for w, ps in self.pairs.items():  # an override pair uses its own link, not the above
            for p, link in ps.items():
                nbytes = self.mult[w] * self.hosts[p].nbytes
                if self.node[w] != self.node[p]:
                    nic_w[self.node[w]] -= nbytes
                    nic_h[self.node[p]] -= nbytes
                else:
                    link_w[w] -= nbytes
                    link_h[p] -= nbytes
                extra_w[w] += nbytes / link.bandwidth
                extra_h[p] += nbytes / link.bandwidth
        self.nic_tx = {n: b / self._network(n).bandwidth for n, b in nic_w.items() if b > 0}
        self.nic_rx = {m: b / self._network(m).bandwidth for m, b in nic_h.items() if b > 0}
        self.link_tx = self._links(link_w, extra_w)
        self.link_rx = self._links(link_h, extra_h)
        # Serialise at the sender, deserialise at the receiver (both ends of every pair).
        self.cpu = {
            d: (self.mult.get(d, 0) * self.total + n_workers * self._held(d)) / self.cpu_bw
            for d in self.node
        }

    def _links(self, nbytes: dict[str, int], extra: dict[str, float]) -> dict[str, float]:
        """Default-link bytes over the node's intra link, plus the override pairs' time."""
        out: dict[str, float] = {}
        for d, b in nbytes.items():
            if b > 0:
                out[d] = b / self._intra(self.node[d]).bandwidth + extra.get(d, 0.0)
            elif d in extra:
                out[d] = extra[d]
        return out

    def _view(self, w: str) -> _View:
        n = self.node[w]
        on_node = self.node_bytes.get(n, 0)
        pairs = self.pairs.get(w)
        if not pairs:
            return _View(n, {}, self.total - on_node, on_node - self._held(w), {})
        touched: dict[str, int] = defaultdict(int)
        same = 0
        for p in pairs:
            if self.node[p] == n:
                same += self.hosts[p].nbytes
            else:
                touched[self.node[p]] += self.hosts[p].nbytes
        cross = self.total - on_node - sum(touched.values())
        return _View(n, pairs, cross, on_node - self._held(w) - same, touched)

    def _rank(self) -> None:
        """Largest-first orders to take per-worker maxima over all but a few entries."""
        self.nic_rx_rank = _Ranked(self.nic_rx)
        net = {m: self._network(m) for m in self.nic_rx}
        # One worker alone sends a node all its shard bytes (less its override partners').
        self.nic_rx_alone = _Ranked({m: self.node_bytes[m] / net[m].bandwidth for m in net})
        self.rounds_rank = _Ranked({m: self.node_rounds[m] for m in net})
        self.lat_rounds_rank = _Ranked({m: self.node_rounds[m] * net[m].latency_s for m in net})
        self.link_rx_on = {
            n: _Ranked({p: self.link_rx[p] for p in ps if p in self.link_rx})
            for n, ps in self.hosts_on.items()
        }
        self.rounds_on = {
            n: _Ranked({p: self.hosts[p].rounds for p in ps}) for n, ps in self.hosts_on.items()
        }
        self.cpu_hosts = max(self.cpu[p] for p in self.hosts)

    def latency(self, w: str) -> float:
        """Worst rounds x link latency over ``w``'s shards on other devices."""
        v = self.views[w]
        lat = 0.0
        if v.cross > 0:
            own = self._network(v.node).latency_s
            skip = (v.node, *v.touched)
            # An inter-node path takes the larger of the two nodes' latencies.
            lat = max(self.rounds_rank.top(skip) * own, self.lat_rounds_rank.top(skip))
            for m in v.touched:
                far = max(own, self._network(m).latency_s)
                lat = max(lat, self.rounds_on[m].top(v.pairs) * far)
        if v.intra > 0:
            rounds = self.rounds_on[v.node].top((w, *v.pairs))
            lat = max(lat, rounds * self._intra(v.node).latency_s)
        for p, link in v.pairs.items():
            lat = max(lat, self.hosts[p].rounds * link.latency_s)
        return lat

    def busiest_used(self, w: str) -> float:
        """The busiest resource any of ``w``'s transfers uses, all workers active."""
        v = self.views[w]
        busy = max(self.cpu[w], self.cpu_hosts)  # its own cpu and every shard host's
        if v.cross > 0:
            full = [m for m, b in v.touched.items() if b == self.node_bytes[m]]
            busy = max(busy, self.nic_tx[v.node], self.nic_rx_rank.top((v.node, *full)))
        near = self.link_rx_on.get(v.node)
        if near is not None:
            busy = max(busy, near.top((w, *v.pairs)))
        busy = max(busy, self.link_tx.get(w, 0.0))
        for p in v.pairs:
            busy = max(busy, self.link_rx[p])
        return busy

    def busiest_alone(self, w: str) -> float:
        """The busiest resource ``w``'s transfers use when no other worker is active."""
        v = self.views[w]
        # Its cpu handles every shard's bytes, so no shard host's cpu is busier.
        busy = (self.total + self._held(w)) / self.cpu_bw
        if v.cross > 0:
            busy = max(
                busy,
                v.cross / self._network(v.node).bandwidth,
                self.nic_rx_alone.top((v.node, *v.touched)),
            )
            for m, b in v.touched.items():
                if b < self.node_bytes[m]:
                    busy = max(busy, (self.node_bytes[m] - b) / self._network(m).bandwidth)
        # Its link carries all its link pairs, so no partner's link is busier.
        link = v.intra / self._intra(v.node).bandwidth if v.intra > 0 else 0.0
        for p, pair in v.pairs.items():
            link += self.hosts[p].nbytes / pair.bandwidth
        return max(busy, link)

    def bottleneck(self) -> tuple[float, str]:
        """The busiest resource's time and name (a tie: the first one charged)."""
        groups = {
            "nic_tx": self.nic_tx,
            "nic_rx": self.nic_rx,
            "link_tx": self.link_tx,
            "link_rx": self.link_rx,
            "cpu": self.cpu,
        }
        top = max(max(g.values(), default=0.0) for g in groups.values())
        floor = top * (1 - _TIE_REL)
        tied = [(kind, k) for kind, g in groups.items() for k, v in g.items() if v >= floor]
        kind, key = min(tied, key=lambda r: self._charged_at(*r))
        return top, f"{kind}:{key}"

    def _charged_at(self, kind: str, key: str) -> tuple[int, int, int]:
        """First charge of a resource when pairs are taken worker by worker, shard by shard:
        (worker index, shard index, 0-3 for tx, rx, sender cpu, receiver cpu)."""
        if kind == "cpu":
            w0, j0 = next(iter(self.first)), next(iter(self.hosts.values())).first
            if key == w0:
                return 0, j0, 2
            h = self.hosts.get(key)
            return (0, h.first, 3) if h is not None else (self.first[key], j0, 2)
        if kind == "nic_tx":  # the node's first worker with a shard across the NICs
            w, j = next(
                (w, h.first)
                for w in self.workers_on[key]
                for p, h in self.hosts.items()
                if self.node[p] != key and p not in self.views[w].pairs
            )
            return self.first[w], j, 0
        if kind == "nic_rx":  # the first worker of another node, to the node's first shard
            w, p = next(
                (w, p)
                for w, v in self.views.items()
                if v.node != key
                for p in self.hosts_on[key]
                if p not in v.pairs
            )
            return self.first[w], self.hosts[p].first, 1
        if kind == "link_tx":  # the worker's first shard on its node or over an override
            v = self.views[key]
            near = [p for p in self.hosts_on.get(v.node, [])[:2] if p != key]
            return self.first[key], min(self.hosts[p].first for p in [*near, *v.pairs]), 0
        # link_rx: the first other worker of the host's node or with an override to it.
        near = [w for w in self.workers_on.get(self.node[key], [])[:2] if w != key]
        senders = [*near, *self.partners.get(key, [])]
        return min(self.first[w] for w in senders), self.hosts[key].first, 1


def ps_sync_time(
    tensor_bytes: Sequence[int],
    workers: Sequence[str],
    ps_devices: Sequence[str],
    cluster: Cluster,
    *,
    policy: str = "round_robin",
    assignment: Sequence[Sequence[int]] | None = None,
    grpc_threads: int = GRPC_THREADS,
    serialize_bw: float = SERIALIZE_BANDWIDTH,
) -> PsTiming:
    """Push gradients to and pull parameters from the PS shards (``ps_devices[s]`` = shard s).

    Every worker pushes shard ``s``'s bytes to ``ps_devices[s]``; once all pushes are in
    (BSP: the PS aggregates before serving), every worker pulls them back. In each phase all
    transfers run concurrently and a resource's busy time is the sum over the transfers
    sharing it of bytes / bandwidth: a node's NIC per direction for inter-node transfers, a
    device's link per direction inside a node (or for a pair override), and each device's CPU
    for (de)serialisation at ``serialize_bw * grpc_threads`` (one core per gRPC thread;
    overlapped with the transfers, paper 000). A transfer ends when the busiest resource it
    uses drains, plus ``ceil(tensors / grpc_threads)`` link latencies (messages leave
    ``grpc_threads`` at a time). A PS on the worker's own device moves no bytes over a link.

    ``per_worker_s[w]`` = push phase (bounded by the busiest resource overall) + ``w``'s
    pull. ``async_per_worker_s[w]`` = ``w``'s push + pull with no other worker active.
    ``assignment`` (tensor indices per shard, e.g. ``Plan.ps_assignment``) overrides
    ``policy``. The bottleneck named on a tie (within 1e-12) is the first resource a
    worker-by-worker, shard-by-shard walk of the push transfers charges.
    """
    if not ps_devices:
        raise ValueError("ps_sync_time needs at least one PS device")
    shards = (
        [list(s) for s in assignment]
        if assignment is not None
        else assign_ps_shards(tensor_bytes, len(ps_devices), policy)
    )
    if len(shards) != len(ps_devices):
        raise ValueError(f"assignment has {len(shards)} shards for {len(ps_devices)} PS devices")
    shard_bytes = tuple(sum(int(tensor_bytes[i]) for i in s) for s in shards)
    rounds = [math.ceil(len(s) / grpc_threads) for s in shards]
    hosts = _hosts(ps_devices, shard_bytes, rounds)
    if not workers or not hosts:  # nothing to move
        zero = dict.fromkeys(workers, 0.0)
        return PsTiming(
            sync_s=0.0,
            per_worker_s=zero,
            push_s=0.0,
            pull_s=0.0,
            bottleneck="none",
            shard_bytes=shard_bytes,
            async_per_worker_s=dict(zero),
        )
    t = _Traffic(workers, hosts, cluster, serialize_bw * grpc_threads)
    latency = {w: t.latency(w) for w in t.first}
    busiest, name = t.bottleneck()
    phase = busiest + max(latency.values())  # push and pull alike (mirror images)
    per_worker = {w: phase + (t.busiest_used(w) + lat) for w, lat in latency.items()}
    async_s = {w: 2 * (t.busiest_alone(w) + lat) for w, lat in latency.items()}
    return PsTiming(
        sync_s=max(per_worker.values()),
        per_worker_s=per_worker,
        push_s=phase,
        pull_s=phase,
        bottleneck=name,
        shard_bytes=shard_bytes,
        async_per_worker_s=async_s,
    )
