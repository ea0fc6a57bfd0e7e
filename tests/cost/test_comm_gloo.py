"""gloo's reduce and broadcast (cost.comm_gloo) against hand counts of their algorithms."""

from __future__ import annotations

import math

import pytest

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Cluster, Device, Link
from hetplan.cost.comm_gloo import (
    GLOO_ASYNC_OVERLAP,
    gloo_broadcast_time,
    gloo_ps_phases,
    gloo_reduce_time,
)

IDS = ["n0.0", "n0.1", "n0.2", "n0.3"]


def four(step_s: float | None, overhead_s: float = 0.0, bandwidth: float | None = None) -> Cluster:
    """Four devices; the pair (0, 1) is slow (2 ms, 0.5 GB/s), the rest 0.1 ms, 1 GB/s."""
    devices = tuple(
        Device(id=i, type=device_type("cpu"), node="n0", index=k) for k, i in enumerate(IDS)
    )
    return Cluster(
        name="g",
        devices=devices,
        intra_links={"n0": Link(kind="t", bandwidth=1e9, latency_s=1e-4)},
        pair_links={("n0.0", "n0.1"): Link(kind="t", bandwidth=0.5e9, latency_s=2e-3)},
        collective_overhead_s=overhead_s,
        collective_step_s=step_s,
        collective_bandwidth=bandwidth,
    )


def test_reduce_is_a_ring_reduce_scatter_then_a_gather_to_the_root() -> None:
    s = 4e6  # chunks of 1 MB; the slowest ring edge is (0, 1): 0.5 GB/s -> 2 ms per chunk
    # W = 4 steps of (L + 2 ms), then the root takes 3 chunks at once: L + 6 ms.
    capped = 4 * (0.3e-3 + 2e-3) + 0.3e-3 + 6e-3
    assert gloo_reduce_time(s, IDS, four(0.3e-3)) == pytest.approx(capped)
    assert gloo_reduce_time(s, IDS, four(None)) == pytest.approx(4 * 4e-3 + 2e-3 + 6e-3)
    # a cap above every latency changes nothing; the per-call overhead is added once
    assert gloo_reduce_time(s, IDS, four(5e-3)) == gloo_reduce_time(s, IDS, four(None))
    with_overhead = gloo_reduce_time(s, IDS, four(0.3e-3, overhead_s=1e-3))
    assert with_overhead == pytest.approx(capped + 1e-3)


def test_broadcast_is_a_binomial_tree() -> None:
    s = 4e6  # the whole buffer per step: 8 ms on the slowest edge
    assert gloo_broadcast_time(s, IDS, four(0.3e-3)) == pytest.approx(2 * (0.3e-3 + 8e-3))
    three = IDS[:3]  # ceil(log2 3) = 2 steps
    assert gloo_broadcast_time(s, three, four(None)) == pytest.approx(2 * (2e-3 + 8e-3))


def test_one_rank_or_no_bytes_cost_nothing() -> None:
    c = four(0.3e-3, overhead_s=1e-3)
    assert gloo_reduce_time(4e6, IDS[:1], c) == gloo_broadcast_time(4e6, IDS[:1], c) == 0.0
    assert gloo_reduce_time(0, IDS, c) == gloo_broadcast_time(0, IDS, c) == 0.0


def test_ps_phases_sum_the_hosts_calls_over_the_measured_overlap() -> None:
    c = four(0.3e-3)
    hosts = {"n0.0": 4e6, "n0.2": 2e6, "n0.3": 0.0}  # a zero-byte shard moves nothing
    push, pull = gloo_ps_phases(hosts, IDS, c)
    reduce = gloo_reduce_time(4e6, IDS, c) + gloo_reduce_time(2e6, IDS, c)
    bcast = gloo_broadcast_time(4e6, IDS, c) + gloo_broadcast_time(2e6, IDS, c)
    assert push == pytest.approx(reduce / GLOO_ASYNC_OVERLAP)
    assert pull == pytest.approx(bcast / GLOO_ASYNC_OVERLAP)
    one = gloo_ps_phases({"n0.0": 4e6}, IDS, c)  # one call: nothing to overlap with
    assert one == pytest.approx((gloo_reduce_time(4e6, IDS, c), gloo_broadcast_time(4e6, IDS, c)))
    assert math.isclose(GLOO_ASYNC_OVERLAP, 1.3)


def test_reduce_and_broadcast_keep_the_pairs_bandwidth_under_a_bandwidth_cap() -> None:
    # The cap measured from an all-reduce's slope is not what gloo's reduce and broadcast see
    # (module docstring): a cap of 0.1 GB/s, far below every pair, changes neither.
    s = 4e6
    for call in (gloo_reduce_time, gloo_broadcast_time):
        capped = call(s, IDS, four(0.3e-3, bandwidth=0.1e9))
        assert capped == pytest.approx(call(s, IDS, four(0.3e-3)))
