"""FSDP2's collectives on CPU ranks (gloo) priced against hand counts: the measured share of
an all-reduce's fixed cost and of its bytes, FSDP2's copy of the buffer and its hooks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Link
from hetplan.cost.ps_cpu import COPY_BANDWIDTH
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef
from hetplan.predict import sharded
from hetplan.predict.sharded import (
    FSDP2_CALL_HOST_S,
    GLOO_ALL_GATHER_VS_ALL_REDUCE,
    GLOO_REDUCE_SCATTER_VS_ALL_REDUCE,
    GLOO_SHARD_CALL_VS_ALL_REDUCE,
    collective_times,
    gloo_collective_s,
)

LATENCY_S = 1e-3
BANDWIDTH = 1e9  # bytes/s
MB = 1e6
CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"


def _ring(n: int) -> list[Link]:
    return [Link(kind="custom", bandwidth=BANDWIDTH, latency_s=LATENCY_S) for _ in range(n)]


@pytest.mark.parametrize(
    "ratio", [GLOO_ALL_GATHER_VS_ALL_REDUCE, GLOO_REDUCE_SCATTER_VS_ALL_REDUCE]
)
def test_gloo_collective_by_hand(ratio: float) -> None:
    # 3 ranks, 6 MB whole: the call's share of an all-reduce's 4 step latencies of 1 ms, 2
    # steps of ratio x 2 x 2 MB at 1 GB/s, and a copy of 6 MB on a half-speed core
    call = GLOO_SHARD_CALL_VS_ALL_REDUCE * 4 * LATENCY_S
    moved = 2 * ratio * 2 * 2 * MB / BANDWIDTH
    expected = call + moved + 6 * MB / COPY_BANDWIDTH / 0.5
    assert gloo_collective_s(6 * MB, _ring(3), ratio, 0.5) == pytest.approx(expected)


def test_a_small_call_costs_its_share_of_an_all_reduce_whatever_the_ring() -> None:
    """gloo's small all-gather costs about what its all-reduce does (measured 0.73-1.03 of
    it), not the ring's half: 1 byte over 2 and 4 ranks against 2 (W - 1) latencies."""
    for n in (2, 4):
        got = gloo_collective_s(1.0, _ring(n), GLOO_ALL_GATHER_VS_ALL_REDUCE, speed=1e12)
        all_reduce = 2 * (n - 1) * LATENCY_S
        assert got == pytest.approx(GLOO_SHARD_CALL_VS_ALL_REDUCE * all_reduce, rel=1e-3)


def test_bytes_dominated_collective_is_the_ratio_of_an_all_reduce() -> None:
    """Where latency and copies are negligible the all-gather costs the measured ratio of a
    ring all-reduce of the same bytes: 2 (n - 1) / n x S / B."""
    links = [Link(kind="custom", bandwidth=BANDWIDTH, latency_s=0.0) for _ in range(4)]
    whole = 400 * MB
    all_reduce = 2 * 3 / 4 * whole / BANDWIDTH
    got = gloo_collective_s(whole, links, GLOO_ALL_GATHER_VS_ALL_REDUCE, speed=1e9)
    assert got == pytest.approx(GLOO_ALL_GATHER_VS_ALL_REDUCE * all_reduce)


def test_nothing_to_gather_costs_nothing() -> None:
    assert gloo_collective_s(0.0, _ring(2), GLOO_ALL_GATHER_VS_ALL_REDUCE, 1.0) == 0.0


def test_every_call_pays_the_clusters_collective_overhead() -> None:
    """As an all-reduce does (cost-models §3.5): each all-gather and reduce-scatter of a layer
    with parameters costs the cluster's per-call overhead more; a layer without parameters
    (a pooling layer: no FSDP2 group) calls nothing."""
    graph = build_graph(ModelRef(name="resnet-tiny", dataset="cifar10"))
    cluster = load_cluster(CLUSTERS / "local-cpu.yaml")
    devices = [d.id for d in cluster.devices]
    overhead = 2e-3
    with_call = dataclasses.replace(cluster, collective_overhead_s=overhead)
    without = dataclasses.replace(cluster, collective_overhead_s=0.0)
    got, base = (
        collective_times(devices, graph, with_call),
        collective_times(devices, graph, without),
    )
    for layer, g, s, g0, s0 in zip(graph.layers, *got, *base, strict=True):
        expected = overhead if layer.param_bytes > 0 else 0.0
        assert g - g0 == pytest.approx(expected) and s - s0 == pytest.approx(expected)
    assert any(x.param_bytes == 0 for x in graph.layers)  # the case without a call is seen


def test_fsdp2_hooks_cost_each_call_on_the_slowest_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each all-gather and reduce-scatter of a layer with parameters on CPU ranks costs
    FSDP2's hooks, :data:`FSDP2_CALL_HOST_S` over the slowest rank's speed (0.5 on the 4-on-2
    cluster); a layer without parameters calls nothing."""
    graph = build_graph(ModelRef(name="resnet-tiny", dataset="cifar10"))
    cluster = load_cluster(CLUSTERS / "local-cpu-4on2.yaml")
    devices = [d.id for d in cluster.devices]
    got = collective_times(devices, graph, cluster)
    monkeypatch.setattr(sharded, "FSDP2_CALL_HOST_S", 0.0)
    base = collective_times(devices, graph, cluster)
    for layer, g, s, g0, s0 in zip(graph.layers, *got, *base, strict=True):
        expected = FSDP2_CALL_HOST_S / 0.5 if layer.param_bytes > 0 else 0.0
        assert g - g0 == pytest.approx(expected) and s - s0 == pytest.approx(expected)
