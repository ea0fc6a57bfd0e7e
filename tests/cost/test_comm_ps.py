"""Parameter-server shard assignment and synchronisation time."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetplan.cost.comm import assign_ps_shards, ps_sync_time

FAST_CPU = 1e15  # bytes/s: makes (de)serialisation negligible where a test isolates links


def test_round_robin_vs_size() -> None:
    sizes = [100, 10, 10, 10]
    assert assign_ps_shards(sizes, 2, "round_robin") == [[0, 2], [1, 3]]
    assert assign_ps_shards(sizes, 2, "size") == [[0], [1, 2, 3]]


def test_one_huge_tensor_loads_one_shard() -> None:
    sizes = [1000, 1, 1, 1]
    for policy in ("round_robin", "size"):
        shards = assign_ps_shards(sizes, 4, policy)
        loads = sorted(sum(sizes[i] for i in s) for s in shards)
        assert loads[-1] == 1000


@given(
    sizes=st.lists(st.integers(0, 10**6), max_size=30),
    shards=st.integers(1, 6),
    policy=st.sampled_from(["round_robin", "size"]),
)
def test_assignment_places_every_tensor_once(sizes, shards, policy) -> None:
    got = assign_ps_shards(sizes, shards, policy)
    assert len(got) == shards
    assert sorted(i for s in got for i in s) == list(range(len(sizes)))


def test_bad_policy_and_shards() -> None:
    with pytest.raises(ValueError, match="policy"):
        assign_ps_shards([1], 1, "random")
    with pytest.raises(ValueError, match="shards"):
        assign_ps_shards([1], 0, "size")


def test_concurrent_transfers_share_the_nic(make_cluster) -> None:
    cluster = make_cluster([2, 1], net_bw=1e9, net_lat=0.0)
    one = ps_sync_time([10**8], ["n0.0"], ["n1.0"], cluster, serialize_bw=FAST_CPU)
    two = ps_sync_time([10**8], ["n0.0", "n0.1"], ["n1.0"], cluster, serialize_bw=FAST_CPU)
    # One worker: 0.1 s push + 0.1 s pull. Two workers on n0 share n0's and n1's NICs.
    assert one.sync_s == pytest.approx(0.2)
    assert two.push_s == pytest.approx(0.2)
    assert two.sync_s == pytest.approx(0.4)
    assert two.bottleneck in {"nic_tx:n0", "nic_rx:n1"}
    # Asynchronous: each worker's own push + pull, no contention.
    assert two.async_per_worker_s == pytest.approx({"n0.0": 0.2, "n0.1": 0.2})


def test_load_imbalance_sets_the_bottleneck(make_cluster) -> None:
    # Workers on n0 and n1, one PS on each of n2 and n3.
    cluster = make_cluster([1, 1, 1, 1], net_bw=1e9, net_lat=0.0)
    workers, ps = ["n0.0", "n1.0"], ["n2.0", "n3.0"]
    skewed = ps_sync_time([3 * 10**8, 10**8], workers, ps, cluster, serialize_bw=FAST_CPU)
    # Shard 0 holds 300 MB; both workers push it through n2's NIC: 0.6 s.
    assert skewed.shard_bytes == (3 * 10**8, 10**8)
    assert skewed.push_s == pytest.approx(0.6)
    assert skewed.bottleneck == "nic_rx:n2"
    balanced = ps_sync_time([2 * 10**8, 2 * 10**8], workers, ps, cluster, serialize_bw=FAST_CPU)
    assert balanced.push_s == pytest.approx(0.4)
    assert balanced.sync_s < skewed.sync_s


def test_colocated_ps_uses_no_link(make_cluster) -> None:
    cluster = make_cluster([1, 1], net_bw=1e9, net_lat=0.0)
    got = ps_sync_time([10**8], ["n0.0", "n1.0"], ["n0.0"], cluster, serialize_bw=FAST_CPU)
    # Only n1.0's traffic crosses the network: 0.1 s each way.
    assert got.push_s == pytest.approx(0.1)
    assert got.per_worker_s["n0.0"] == pytest.approx(0.1)  # waits for the push phase only
    assert got.per_worker_s["n1.0"] == pytest.approx(0.2)
    assert got.async_per_worker_s["n0.0"] == pytest.approx(0.0, abs=1e-6)


def test_serialisation_overlaps_transfer(make_cluster) -> None:
    cluster = make_cluster([1, 1], net_bw=1e9, net_lat=0.0)
    # Transfer 0.1 s; serialising 100 MB on one thread at 100 MB/s takes 1 s: max, not sum.
    got = ps_sync_time([10**8], ["n0.0"], ["n1.0"], cluster, grpc_threads=1, serialize_bw=1e8)
    assert got.push_s == pytest.approx(1.0)
    assert got.bottleneck.startswith("cpu:")


def test_grpc_threads_bound_latency_rounds(make_cluster) -> None:
    cluster = make_cluster([1, 1], net_bw=1e12, net_lat=1e-3)
    tiny = [1] * 16
    got = ps_sync_time(tiny, ["n0.0"], ["n1.0"], cluster, grpc_threads=8, serialize_bw=FAST_CPU)
    # 16 messages, 8 at a time: 2 rounds of the 1 ms inter-node latency per phase.
    assert got.push_s == pytest.approx(2 * 1e-3, rel=1e-6)
    assert got.sync_s == pytest.approx(2 * 2 * 1e-3, rel=1e-6)


def test_explicit_assignment_overrides_policy(make_cluster) -> None:
    cluster = make_cluster([1, 1, 1], net_bw=1e9, net_lat=0.0)
    got = ps_sync_time(
        [10**8, 10**8],
        ["n0.0"],
        ["n1.0", "n2.0"],
        cluster,
        assignment=[[0, 1], []],
        serialize_bw=FAST_CPU,
    )
    assert got.shard_bytes == (2 * 10**8, 0)
    assert got.push_s == pytest.approx(0.2)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 10**8), min_size=1, max_size=6),
    extra=st.integers(0, 3),
    policy=st.sampled_from(["round_robin", "size"]),
)
def test_more_workers_never_sync_faster(make_cluster, sizes, extra, policy) -> None:
    cluster = make_cluster([2, 2, 1, 1])
    workers = ["n0.0", "n0.1", "n1.0", "n1.1"]
    ps = ["n2.0", "n3.0"]
    few = ps_sync_time(sizes, workers[:1], ps, cluster, policy=policy)
    more = ps_sync_time(sizes, workers[: 1 + extra], ps, cluster, policy=policy)
    assert few.sync_s <= more.sync_s * (1 + 1e-12)
