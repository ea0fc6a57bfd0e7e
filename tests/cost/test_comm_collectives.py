"""Collective and point-to-point models against closed forms and hand-computed values."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Cluster, Device, Link
from hetplan.cost.comm import (
    allreduce_time,
    gpipe_comm_time,
    hierarchical_allreduce_time,
    p2p_time,
    ring_allreduce_time,
    ring_allreduce_time_links,
    ring_links,
    ring_tree_crossover_bytes,
    transfer_time,
    tree_allreduce_time,
)

FIXTURE_OK = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def test_p2p_is_alpha_beta() -> None:
    link = Link(kind="x", bandwidth=1e9, latency_s=1e-5)
    assert p2p_time(1e6, link) == pytest.approx(1e-5 + 1e-3, rel=1e-12)
    assert p2p_time(0, link) == 0.0


def test_ring_closed_form_exact() -> None:
    # 2(W-1)/W * S/B + 2(W-1) L with W=4, S=1 GB, B=10 GB/s, L=10 us.
    assert ring_allreduce_time(1e9, 4, 1e10, 1e-5) == pytest.approx(0.15 + 6e-5, rel=1e-12)
    assert ring_allreduce_time(1e9, 1, 1e10, 1e-5) == 0.0
    assert ring_allreduce_time(0, 8, 1e10, 1e-5) == 0.0


def test_ring_on_equal_links_matches_closed_form() -> None:
    link = Link(kind="x", bandwidth=3e9, latency_s=2e-6)
    got = ring_allreduce_time_links(5e7, [link] * 6)
    assert got == pytest.approx(ring_allreduce_time(5e7, 6, 3e9, 2e-6), rel=1e-12)


def test_ring_bounded_by_slowest_link(make_cluster) -> None:
    slow = Link(kind="slow", bandwidth=1e9, latency_s=5e-6)
    cluster = make_cluster([4], intra_bw=1e10, intra_lat=1e-6, pair_links={("n0.1", "n0.2"): slow})
    devices = ["n0.0", "n0.1", "n0.2", "n0.3"]
    # Every step waits for the slow edge: 2(W-1) * (5 us + S/(W * 1 GB/s)).
    expected = 6 * (5e-6 + 4e8 / (4 * 1e9))
    assert allreduce_time(4e8, devices, cluster, algorithm="ring") == pytest.approx(expected)
    # auto picks the ring here: the tree's 2 S / B is slower for this large message.
    assert allreduce_time(4e8, devices, cluster) == pytest.approx(expected)


def test_allreduce_zero_for_one_device_and_overhead_once(make_cluster) -> None:
    cluster = make_cluster([4], intra_bw=1e10, intra_lat=1e-6, overhead=1e-3)
    assert allreduce_time(1e9, ["n0.0"], cluster) == 0.0
    assert allreduce_time(0, ["n0.0", "n0.1"], cluster) == 0.0
    devices = ["n0.0", "n0.1", "n0.2", "n0.3"]
    ring = ring_allreduce_time(1e8, 4, 1e10, 1e-6)
    assert allreduce_time(1e8, devices, cluster, algorithm="ring") == pytest.approx(ring + 1e-3)
    no_overhead = allreduce_time(1e8, devices, cluster, algorithm="ring", collective_overhead_s=0)
    assert no_overhead == pytest.approx(ring)


def test_tree_closed_form_and_crossover() -> None:
    # 2 ceil(log2 8) L + 2 S / B.
    assert tree_allreduce_time(1e6, 8, 1e9, 1e-5) == pytest.approx(6e-5 + 2e-3, rel=1e-12)
    cross = ring_tree_crossover_bytes(8, 1e9, 1e-5)
    assert cross == pytest.approx(8 * 1e9 * 1e-5 * (7 - 3))
    assert ring_allreduce_time(cross, 8, 1e9, 1e-5) == pytest.approx(
        tree_allreduce_time(cross, 8, 1e9, 1e-5)
    )
    assert tree_allreduce_time(cross / 2, 8, 1e9, 1e-5) < ring_allreduce_time(
        cross / 2, 8, 1e9, 1e-5
    )


def test_auto_picks_tree_for_small_messages(make_cluster) -> None:
    cluster = make_cluster([8], intra_bw=1e9, intra_lat=1e-5)
    devices = [f"n0.{i}" for i in range(8)]
    small = 1e3
    assert allreduce_time(small, devices, cluster) == pytest.approx(
        tree_allreduce_time(small, 8, 1e9, 1e-5)
    )


def test_hierarchical_by_hand(make_cluster) -> None:
    cluster = make_cluster([2, 2], intra_bw=1e11, intra_lat=1e-6, net_bw=1e9, net_lat=1e-5)
    groups = [["n0.0", "n0.1"], ["n1.0", "n1.1"]]
    intra_phase = 1e-6 + 1e8 / (2 * 1e11)  # (k-1) steps of L + S/(k B), k = 2
    inter = 2 * 1 / 2 * 1e8 / 1e9 + 2 * 1 * 1e-5  # ring of 2 nodes, 10 us end to end
    expected = 2 * intra_phase + inter
    assert hierarchical_allreduce_time(1e8, groups, cluster) == pytest.approx(expected)
    devices = [d for g in groups for d in g]
    # Devices on several nodes: auto goes hierarchical.
    assert allreduce_time(1e8, devices, cluster) == pytest.approx(expected)


def test_ring_links_share_nic_when_ring_interleaves_nodes(make_cluster) -> None:
    cluster = make_cluster([2, 2], net_bw=1e9)
    grouped = ring_links(["n0.0", "n0.1", "n1.0", "n1.1"], cluster)
    assert sorted(link.bandwidth for link in grouped) == [1e9, 1e9, 1e10, 1e10]
    interleaved = ring_links(["n0.0", "n1.0", "n0.1", "n1.1"], cluster)
    # Two ring edges leave each node through one NIC: half its bandwidth each.
    assert [link.bandwidth for link in interleaved] == [5e8] * 4


def test_unknown_algorithm_rejected(make_cluster) -> None:
    with pytest.raises(ValueError, match="algorithm"):
        allreduce_time(1.0, ["n0.0", "n0.1"], make_cluster([2]), algorithm="butterfly")


@FIXTURE_OK
@given(
    a=st.floats(1.0, 1e10),
    b=st.floats(1.0, 1e10),
    world=st.integers(2, 9),
    algorithm=st.sampled_from(["auto", "ring", "tree"]),
)
def test_allreduce_monotone_in_bytes(make_cluster, a, b, world, algorithm) -> None:
    cluster = make_cluster([world])
    devices = [f"n0.{i}" for i in range(world)]
    lo, hi = sorted((a, b))
    t_lo = allreduce_time(lo, devices, cluster, algorithm=algorithm)
    assert t_lo <= allreduce_time(hi, devices, cluster, algorithm=algorithm) * (1 + 1e-12)


@FIXTURE_OK
@given(
    nbytes=st.floats(1.0, 1e10),
    bw1=st.floats(1e6, 1e12),
    bw2=st.floats(1e6, 1e12),
    nodes=st.sampled_from([[4], [2, 2], [3, 1]]),
)
def test_allreduce_non_increasing_in_bandwidth(make_cluster, nbytes, bw1, bw2, nodes) -> None:
    lo, hi = sorted((bw1, bw2))
    slow = make_cluster(nodes, intra_bw=lo, net_bw=lo / 10)
    fast = make_cluster(nodes, intra_bw=hi, net_bw=hi / 10)
    devices = [d.id for d in slow.devices]
    assert allreduce_time(nbytes, devices, fast) <= allreduce_time(nbytes, devices, slow) * (
        1 + 1e-12
    )


@given(nbytes=st.floats(0.0, 1e10), world=st.integers(1, 64))
def test_tree_latency_is_logarithmic(nbytes, world) -> None:
    t = tree_allreduce_time(nbytes, world, 1e9, 1.0)
    if world == 1 or nbytes == 0:
        assert t == 0.0
    else:
        assert t == pytest.approx(2 * math.ceil(math.log2(world)) + 2 * nbytes / 1e9)


def test_transfer_time(make_cluster) -> None:
    cluster = make_cluster([1, 1], net_bw=1e9, net_lat=1e-5)
    assert transfer_time(1e6, "n0.0", "n1.0", cluster) == pytest.approx(1e-5 + 1e-3)
    assert transfer_time(1e6, "n0.0", "n0.0", cluster) == 0.0


def test_gpipe_eq_6_2_by_hand() -> None:
    # Two stages: every micro-batch crosses the one cut forward and backward.
    assert gpipe_comm_time([0.5], 4) == pytest.approx(2 * 4 * 0.5)
    # Three stages, cuts 1 s and 3 s, m = 4: fill c1, 3 steps at max, drain c2.
    assert gpipe_comm_time([1.0, 3.0], 4) == pytest.approx(2 * (1.0 + 3 * 3.0 + 3.0))
    assert gpipe_comm_time([], 4) == 0.0


def test_hierarchical_with_single_device_nodes(make_cluster) -> None:
    cluster = make_cluster([1, 1, 1], net_bw=1e9, net_lat=0.0)
    groups = [["n0.0"], ["n1.0"], ["n2.0"]]
    expected = ring_allreduce_time(3e8, 3, 1e9, 0.0)
    assert hierarchical_allreduce_time(3e8, groups, cluster) == pytest.approx(expected)


def test_measured_step_caps_bound_every_ring_edge(make_cluster) -> None:
    # A step's measured latency (0.2 ms) and bandwidth (0.5 GB/s) cap the edges' 1 ms and
    # 2 GB/s, with or without pair overrides (the grouped and the concrete rings agree).
    devices = ["n0.0", "n0.1", "n0.2"]
    s = 3e6  # chunks of 1 MB: 2 ms each at 0.5 GB/s
    expected = 4 * (0.2e-3 + 2e-3)
    for pairs in ({}, {("n0.0", "n0.1"): Link(kind="p", bandwidth=2e9, latency_s=1e-3)}):
        cluster = dataclasses.replace(
            make_cluster([3], intra_bw=2e9, intra_lat=1e-3, pair_links=pairs),
            collective_step_s=0.2e-3,
            collective_bandwidth=0.5e9,
        )
        assert allreduce_time(s, devices, cluster, algorithm="ring") == pytest.approx(expected)
        assert allreduce_time(s, devices, cluster) == pytest.approx(expected)  # ring < tree
        assert all(e.bandwidth == 0.5e9 for e in ring_links(devices, cluster))
        # the latency cap alone leaves the bandwidth (gloo's reduce and broadcast)
        uncapped = ring_links(devices, cluster, capped_bandwidth=False)
        assert [(e.latency_s, e.bandwidth) for e in uncapped] == [(0.2e-3, 2e9)] * 3
    # caps above every link change nothing
    loose = dataclasses.replace(
        make_cluster([3], intra_bw=2e9, intra_lat=1e-3),
        collective_step_s=1,
        collective_bandwidth=1e12,
    )
    assert allreduce_time(s, devices, loose, algorithm="ring") == pytest.approx(
        ring_allreduce_time(s, 3, 2e9, 1e-3)
    )


def test_cpu_ranks_ring_as_gloo_does_where_nccl_would_take_the_tree() -> None:
    # Four CPU ranks, 1 ms steps, 20 KB: gloo rings, 2 (W-1) = 6 steps of 1 ms + 5 KB / 1 GB/s;
    # the tree (what `auto` picks for GPUs, 2 log2(4) = 4 latencies) would be cheaper.
    cpu = device_type("cpu")
    devices = tuple(Device(id=f"n0.{k}", type=cpu, node="n0", index=k) for k in range(4))
    link = Link(kind="t", bandwidth=1e9, latency_s=1e-3)
    cluster = Cluster(name="c", devices=devices, intra_links={"n0": link})
    ids = [d.id for d in devices]
    ring = 6 * (1e-3 + 20e3 / (4 * 1e9))
    assert allreduce_time(20e3, ids, cluster) == pytest.approx(ring)
    assert tree_allreduce_time(20e3, 4, 1e9, 1e-3) < ring
    a100 = device_type("A100-80GB")
    gpus = dataclasses.replace(
        cluster, devices=tuple(dataclasses.replace(d, type=a100) for d in devices)
    )
    tree = tree_allreduce_time(20e3, 4, 1e9, 1e-3)
    assert allreduce_time(20e3, ids, gpus) == pytest.approx(tree)
    assert cluster.gloo(ids) and not gpus.gloo(ids)
