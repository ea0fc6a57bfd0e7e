"""The aggregated PS model against the per-pair one it replaced (brute force, kept here).

``reference_ps_sync_time`` is the old O(workers x shards) implementation, unchanged but for
returning its push-phase busy times too: random clusters, shard placements and tensor sizes
must give the same timings (rel 1e-9) and the same bottleneck. With power-of-two bandwidths
every busy time is exact in both, so exact ties must be broken the same way.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.cost.comm_ps import PsTiming, assign_ps_shards, ps_sync_time
from hetplan.errors import InputError

GPU = DeviceType(
    name="toy-gpu",
    peak_flops={"fp32": 1e12},
    memory_bandwidth=1e11,
    memory_bytes=16e9,
    idle_power_w=50.0,
    max_power_w=250.0,
)


# --- Reference: the per-pair model as it was before aggregation. ----------------------------


def reference_assign(tensor_bytes: Sequence[int], shards: int, policy: str) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(shards)]
    load = [0] * shards
    for i, nbytes in enumerate(tensor_bytes):
        s = i % shards if policy == "round_robin" else min(range(shards), key=load.__getitem__)
        out[s].append(i)
        load[s] += int(nbytes)
    return out


@dataclass
class _Flows:
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
            return
        link = cluster.link(src, dst)
        ns, nd = cluster.device(src).node, cluster.device(dst).node
        key = (src, dst) if src < dst else (dst, src)
        if ns != nd and key not in cluster.pair_links:
            self._charge(worker, f"nic_tx:{ns}", nbytes / cluster.network[ns].bandwidth)
            self._charge(worker, f"nic_rx:{nd}", nbytes / cluster.network[nd].bandwidth)
        else:
            self._charge(worker, f"link_tx:{src}", nbytes / link.bandwidth)
            self._charge(worker, f"link_rx:{dst}", nbytes / link.bandwidth)
        self.latency[worker] = max(self.latency[worker], rounds * link.latency_s)

    def cpu(self, worker: str, device: str, seconds: float) -> None:
        self._charge(worker, f"cpu:{device}", seconds)

    def bottleneck(self) -> tuple[float, str]:
        lat = max(self.latency.values(), default=0.0)
        if not self.busy:
            return lat, "none"
        name = max(self.busy, key=self.busy.__getitem__)
        return self.busy[name] + lat, name

    def worker_time(self, worker: str) -> float:
        busy = max((self.busy[r] for r in self.uses[worker]), default=0.0)
        return busy + self.latency[worker]


@dataclass(frozen=True)
class _Shards:
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
            flows.cpu(w, src, nbytes / sh.cpu_bw)
            flows.cpu(w, dst, nbytes / sh.cpu_bw)
    return flows


def reference_ps_sync_time(
    tensor_bytes: Sequence[int],
    workers: Sequence[str],
    ps_devices: Sequence[str],
    cluster: Cluster,
    *,
    policy: str = "round_robin",
    assignment: Sequence[Sequence[int]] | None = None,
    grpc_threads: int = 8,
    serialize_bw: float = 2e9,
) -> tuple[PsTiming, dict[str, float]]:
    """The old model's timing and its push phase's busy time per resource."""
    shards = (
        [list(s) for s in assignment]
        if assignment is not None
        else reference_assign(tensor_bytes, len(ps_devices), policy)
    )
    shard_bytes = tuple(sum(int(tensor_bytes[i]) for i in s) for s in shards)
    rounds = [math.ceil(len(s) / grpc_threads) for s in shards]
    sh = _Shards(ps_devices, shard_bytes, rounds, cluster, serialize_bw * grpc_threads)
    pushes = _phase(workers, sh, push=True)
    push, name = pushes.bottleneck()
    pulls = _phase(workers, sh, push=False)
    per_worker = {w: push + pulls.worker_time(w) for w in workers}
    async_s = {
        w: _phase([w], sh, push=True).worker_time(w) + _phase([w], sh, push=False).worker_time(w)
        for w in workers
    }
    timing = PsTiming(
        sync_s=max(per_worker.values(), default=0.0),
        per_worker_s=per_worker,
        push_s=push,
        pull_s=pulls.bottleneck()[0],
        bottleneck=name,
        shard_bytes=shard_bytes,
        async_per_worker_s=async_s,
    )
    return timing, dict(pushes.busy)


# --- Random cases. -------------------------------------------------------------------------


def _link(rng: random.Random, kind: str, exact: bool) -> Link:
    # Powers of two make every bytes / bandwidth and every sum of them exact.
    bw = (
        2.0 ** rng.randint(20, 34)
        if exact
        else rng.choice([1e9, 2.5e9, 1e10, rng.uniform(1e8, 1e11)])
    )
    lat = rng.choice([0.0, 1e-6, 5e-6, 2e-5, rng.uniform(0, 1e-4)])
    return Link(kind=kind, bandwidth=bw, latency_s=lat)


def random_cluster(rng: random.Random, *, exact: bool) -> Cluster:
    counts = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    devices = tuple(
        Device(id=f"n{i}.{j}", type=GPU, node=f"n{i}", index=j)
        for i, k in enumerate(counts)
        for j in range(k)
    )
    nodes = [f"n{i}" for i in range(len(counts))]
    # Some nodes share one link spec: equal busy times, so ties to break.
    shared_net, shared_intra = _link(rng, "net", exact), _link(rng, "intra", exact)
    network = {n: shared_net if rng.random() < 0.5 else _link(rng, "net", exact) for n in nodes}
    intra = {n: shared_intra if rng.random() < 0.5 else _link(rng, "intra", exact) for n in nodes}
    ids = [d.id for d in devices]
    pairs: dict[tuple[str, str], Link] = {}
    if len(ids) > 1:
        for _ in range(rng.choice([0, 0, 1, 2, 5])):
            a, b = sorted(rng.sample(ids, 2))
            pairs[(a, b)] = _link(rng, "pair", exact)
        if rng.random() < 0.1:  # an unsorted key: never looked up
            a, b = sorted(rng.sample(ids, 2))
            pairs[(b, a)] = _link(rng, "pair", exact)
    return Cluster(
        name="rand",
        devices=devices,
        intra_links=intra,
        pair_links=pairs,
        network=network,
    )


def _placement(rng: random.Random, ids: list[str]) -> tuple[list[str], list[str]]:
    shape = rng.choice(["colocated", "separate", "overlap", "one_worker", "one_shard", "dups"])
    k = rng.randint(1, len(ids))
    workers = rng.sample(ids, k)
    if shape == "colocated":
        return workers, list(workers)
    if shape == "separate" and k < len(ids):
        rest = [d for d in ids if d not in workers]
        return workers, rng.sample(rest, rng.randint(1, len(rest)))
    if shape == "one_worker":
        return workers[:1], rng.sample(ids, rng.randint(1, len(ids)))
    if shape == "one_shard":
        return workers, [rng.choice(ids)]
    if shape == "dups":  # a device listed twice: two workers' worth, or two shards on it
        return workers + rng.choices(workers, k=2), rng.choices(ids, k=rng.randint(1, 6))
    return workers, rng.sample(ids, rng.randint(1, len(ids)))


def _tensors(rng: random.Random, exact: bool) -> list[int]:
    top = 10**6 if exact else 10**9
    sizes = [rng.choice([0, rng.randint(1, top), rng.randint(1, 1000)]) for _ in range(30)]
    if rng.random() < 0.3:  # equal sizes: balanced shards, tied loads
        sizes = [rng.choice([0, 1024, 4096])] * rng.randint(0, 30)
    return sizes[: rng.randint(0, len(sizes))]


Case = tuple[list[int], list[str], list[str], Cluster]


def random_case(seed: int, *, exact: bool) -> tuple[Case, dict[str, Any]]:
    rng = random.Random(seed)
    cluster = random_cluster(rng, exact=exact)
    workers, ps = _placement(rng, [d.id for d in cluster.devices])
    sizes = _tensors(rng, exact)
    kwargs: dict[str, Any] = {"grpc_threads": rng.choice([1, 2, 4, 8, 3])}
    kwargs["serialize_bw"] = (
        2.0 ** rng.randint(24, 40) if exact else rng.choice([2e9, 1e15, rng.uniform(1e7, 1e10)])
    )
    if rng.random() < 0.2:
        parts: list[list[int]] = [[] for _ in ps]
        for i in range(len(sizes)):
            parts[rng.randrange(len(ps))].append(i)
        kwargs["assignment"] = parts
    else:
        kwargs["policy"] = rng.choice(["round_robin", "size"])
    return (sizes, workers, ps, cluster), kwargs


def assert_same(new: PsTiming, old: PsTiming, busy: dict[str, float], *, exact: bool) -> None:
    rel = 1e-9
    assert new.shard_bytes == old.shard_bytes
    assert new.sync_s == pytest.approx(old.sync_s, rel=rel, abs=0)
    assert new.push_s == pytest.approx(old.push_s, rel=rel, abs=0)
    assert new.pull_s == pytest.approx(old.pull_s, rel=rel, abs=0)
    assert list(new.per_worker_s) == list(old.per_worker_s)
    assert new.per_worker_s == pytest.approx(old.per_worker_s, rel=rel, abs=0)
    assert list(new.async_per_worker_s) == list(old.async_per_worker_s)
    assert new.async_per_worker_s == pytest.approx(old.async_per_worker_s, rel=rel, abs=0)
    if exact or new.bottleneck == "none" or old.bottleneck == "none":
        assert new.bottleneck == old.bottleneck
    else:
        # Inexact sums: a near tie may fall either way, but the named one is as busy.
        assert busy[new.bottleneck] == pytest.approx(busy[old.bottleneck], rel=rel, abs=0)


@pytest.mark.parametrize("exact", [False, True], ids=["float", "exact"])
def test_matches_per_pair_model_on_random_cases(exact: bool) -> None:
    for seed in range(600):
        args, kwargs = random_case(seed, exact=exact)
        old, busy = reference_ps_sync_time(*args, **kwargs)
        new = ps_sync_time(*args, **kwargs)
        try:
            assert_same(new, old, busy, exact=exact)
        except AssertionError as err:
            raise AssertionError(f"seed {seed}: {args[1:3]} {kwargs}") from err


def test_matches_on_symmetric_cluster_with_ties() -> None:
    # 4 nodes x 4, co-located, equal tensors: every NIC and many cpus tie exactly.
    rng = random.Random(7)
    link = Link(kind="net", bandwidth=2.0**30, latency_s=1e-5)
    intra = Link(kind="intra", bandwidth=2.0**33, latency_s=1e-6)
    devices = tuple(
        Device(id=f"n{i}.{j}", type=GPU, node=f"n{i}", index=j) for i in range(4) for j in range(4)
    )
    nodes = [f"n{i}" for i in range(4)]
    cluster = Cluster(
        name="sym",
        devices=devices,
        intra_links=dict.fromkeys(nodes, intra),
        network=dict.fromkeys(nodes, link),
    )
    ids = [d.id for d in devices]
    for _ in range(40):
        sizes = [4096] * rng.randint(1, 40)
        workers = rng.sample(ids, rng.randint(1, 16))
        ps = rng.choice([workers, ids, rng.sample(ids, 3)])
        for policy in ("round_robin", "size"):
            for serialize_bw in (2.0**28, 2.0**40):
                kw: dict[str, Any] = {"policy": policy, "serialize_bw": serialize_bw}
                old, busy = reference_ps_sync_time(sizes, workers, ps, cluster, **kw)
                new = ps_sync_time(sizes, workers, ps, cluster, **kw)
                assert_same(new, old, busy, exact=True)


def test_nothing_to_move() -> None:
    rng = random.Random(1)
    cluster = random_cluster(rng, exact=True)
    ids = [d.id for d in cluster.devices]
    for sizes, workers in (([0, 0], ids), ([], ids), ([5, 7], [])):
        old, busy = reference_ps_sync_time(sizes, workers, ids[:1], cluster)
        assert_same(ps_sync_time(sizes, workers, ids[:1], cluster), old, busy, exact=True)


def test_missing_links_are_input_errors() -> None:
    devices = (
        Device(id="a.0", type=GPU, node="a", index=0),
        Device(id="a.1", type=GPU, node="a", index=1),
        Device(id="b.0", type=GPU, node="b", index=0),
    )
    net = Link(kind="net", bandwidth=1e9, latency_s=0.0)
    cluster = Cluster(name="c", devices=devices, intra_links={}, network={"a": net})
    for fn in (reference_ps_sync_time, ps_sync_time):
        with pytest.raises(InputError, match="'b' has no network link"):
            fn([10], ["a.0"], ["b.0"], cluster)
        with pytest.raises(InputError, match="'a' has no intra-node link"):
            fn([10], ["a.0"], ["a.1"], cluster)
    # Shards on the worker's own device use no link at all.
    assert ps_sync_time([10], ["a.0"], ["a.0", "a.0"], cluster).push_s > 0


@pytest.mark.parametrize("policy", ["round_robin", "size"])
def test_assignment_matches_linear_scan(policy: str) -> None:
    rng = random.Random(3)
    for _ in range(300):
        sizes = [rng.choice([0, 1, 10, rng.randint(0, 10**6)]) for _ in range(rng.randint(0, 60))]
        shards = rng.randint(1, 12)
        assert assign_ps_shards(sizes, shards, policy) == reference_assign(sizes, shards, policy)
