"""Parameter-server synchronisation: shard assignment, link sharing, gRPC serialisation.

The model follows paper 000 ("communication models for parameter servers"): the traffic of
each PS shard is computed from the real assignment of tensors to shards (load imbalance),
concurrent transfers on a shared resource (a node's NIC, a device's link) slow each other
down, and serialisation/deserialisation runs on CPU cores concurrently with the transfers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from hetplan.cluster.spec import Cluster

POLICIES = ("round_robin", "size")
# TensorFlow's gRPC runtime sends tensors with a pool of threads; "the default value of the
# number of gRPC threads in TensorFlow is 8" (paper 000, Methodology).
GRPC_THREADS = 8  # concurrent messages per (worker, shard) pair
# Per-core protobuf (de)serialisation throughput of tensor payloads. Estimate: a copy-bound
# encode/decode runs at ~1-4 GB/s per core on server CPUs; calibrate with a profile.
SERIALIZE_BANDWIDTH = 2e9  # bytes/s per core


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
    load = [0] * shards
    for i, nbytes in enumerate(tensor_bytes):
        s = i % shards if policy == "round_robin" else min(range(shards), key=load.__getitem__)
        out[s].append(i)
        load[s] += int(nbytes)
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


@dataclass
class _Flows:
    """Per-resource busy time of a set of concurrent transfers, and who uses what."""

    busy: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    uses: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    latency: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def _charge(self, worker: str, resource: str, seconds: float) -> None:
        self.busy[resource] += seconds
        self.uses[worker].add(resource)

    def add(
        self, worker: str, src: str, dst: str, nbytes: float, *, rounds: int, cluster: Cluster
    ) -> None:
        if nbytes <= 0 or src == dst:
            return  # same device: a local copy, no link involved
        link = cluster.link(src, dst)
        ns, nd = cluster.device(src).node, cluster.device(dst).node
        key = (src, dst) if src < dst else (dst, src)
        if ns != nd and key not in cluster.pair_links:
            self._charge(worker, f"nic_tx:{ns}", nbytes / cluster.network[ns].bandwidth)
            self._charge(worker, f"nic_rx:{nd}", nbytes / cluster.network[nd].bandwidth)
        else:
            self._charge(worker, f"link_tx:{src}", nbytes / link.bandwidth)
            self._charge(worker, f"link_rx:{dst}", nbytes / link.bandwidth)
        # Messages go out grpc_threads at a time; each round pays the link latency.
        self.latency[worker] = max(self.latency[worker], rounds * link.latency_s)

    def cpu(self, worker: str, device: str, seconds: float) -> None:
        self._charge(worker, f"cpu:{device}", seconds)

    def bottleneck(self) -> tuple[float, str]:
        """The phase time (busiest resource + worst latency) and that resource's name."""
        lat = max(self.latency.values(), default=0.0)
        if not self.busy:
            return lat, "none"
        name = max(self.busy, key=self.busy.__getitem__)
        return self.busy[name] + lat, name

    def worker_time(self, worker: str) -> float:
        """When ``worker``'s transfers end: its busiest shared resource drains."""
        busy = max((self.busy[r] for r in self.uses[worker]), default=0.0)
        return busy + self.latency[worker]


@dataclass(frozen=True)
class _Shards:
    """What every transfer of a phase needs to know about the shards."""

    ps_devices: Sequence[str]
    shard_bytes: Sequence[int]
    rounds: Sequence[int]
    cluster: Cluster
    cpu_bw: float


def _phase(workers: Sequence[str], sh: _Shards, *, push: bool) -> _Flows:
    flows = _Flows()
    for w in workers:
        for ps, nbytes, r in zip(sh.ps_devices, sh.shard_bytes, sh.rounds, strict=True):
            if nbytes <= 0:
                continue
            src, dst = (w, ps) if push else (ps, w)
            flows.add(w, src, dst, nbytes, rounds=r, cluster=sh.cluster)
            # Serialise at the sender, deserialise at the receiver: CPU work concurrent with
            # the transfers, so only the busiest resource counts (paper 000).
            flows.cpu(w, src, nbytes / sh.cpu_bw)
            flows.cpu(w, dst, nbytes / sh.cpu_bw)
    return flows


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
    ``policy``.
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
    sh = _Shards(ps_devices, shard_bytes, rounds, cluster, serialize_bw * grpc_threads)
    push, name = _phase(workers, sh, push=True).bottleneck()
    pulls = _phase(workers, sh, push=False)
    per_worker = {w: push + pulls.worker_time(w) for w in workers}
    async_s = {
        w: _phase([w], sh, push=True).worker_time(w) + _phase([w], sh, push=False).worker_time(w)
        for w in workers
    }
    return PsTiming(
        sync_s=max(per_worker.values(), default=0.0),
        per_worker_s=per_worker,
        push_s=push,
        pull_s=pulls.bottleneck()[0],
        bottleneck=name,
        shard_bytes=shard_bytes,
        async_per_worker_s=async_s,
    )
