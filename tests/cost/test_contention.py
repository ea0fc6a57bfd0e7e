"""Concurrent collectives share each node's network card (issue 30, item 7): the TP ranks of a
stage all-reduce across replicas at once, each with its share of the card."""

from __future__ import annotations

import pytest

from hetplan.cluster.config import config_from_data
from hetplan.cluster.resolve import resolve_config
from hetplan.cluster.spec import Cluster
from hetplan.cost import comm
from hetplan.cost.contention import concurrent_cluster, crossing_streams
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict.price import _sync_buckets

NET_BPS = 10e9 / 8  # 10GbE in bytes per second before any efficiency (catalog applies its own)


def two_nodes() -> Cluster:
    """Two nodes of two A100s on NVLink, joined by 10GbE."""
    data = {
        "name": "two",
        "nodes": [
            {"name": n, "devices": [{"type": "A100-40GB", "count": 2}], "link": {"type": "NVLink3"}}
            for n in ("a", "b")
        ],
        "network": {"type": "10GbE"},
    }
    return resolve_config(config_from_data(data, "two"), "two")


def test_streams_count_the_groups_that_cross_a_card() -> None:
    cluster = two_nodes()
    across = [["a.0", "b.0"], ["a.1", "b.1"]]  # tp=2, one replica per node
    inside = [["a.0", "a.1"], ["b.0", "b.1"]]  # replicas on the same node: no card
    assert crossing_streams(across, cluster) == {"a": 2, "b": 2}
    assert crossing_streams(inside, cluster) == {}
    assert concurrent_cluster(inside, cluster) is cluster


def test_two_concurrent_allreduces_each_get_half_the_card() -> None:
    cluster = two_nodes()
    shared = concurrent_cluster([["a.0", "b.0"], ["a.1", "b.1"]], cluster)
    assert shared.network["a"].bandwidth == pytest.approx(cluster.network["a"].bandwidth / 2)
    # One device per node: the allreduce is a 2-rank ring over the nodes' link,
    # 2 (L + S / (2 B)) = 2 L + S / B; with half the bandwidth the S / B term doubles.
    size = 100e6
    link = cluster.link("a.0", "b.0")
    alone = comm.allreduce_time(size, ["a.0", "b.0"], cluster, collective_overhead_s=0.0)
    together = comm.allreduce_time(size, ["a.0", "b.0"], shared, collective_overhead_s=0.0)
    assert alone == pytest.approx(2 * link.latency_s + size / link.bandwidth)
    assert together == pytest.approx(2 * link.latency_s + 2 * size / link.bandwidth)


def test_a_tp_stages_gradient_sync_is_priced_with_the_shared_card() -> None:
    cluster = two_nodes()
    stage = [StagePlan(layers=["x"], devices=["a.0", "a.1"])]
    other = [StagePlan(layers=["x"], devices=["b.0", "b.1"])]
    plan = Plan(
        model=ModelRef(name="gpt-tiny"), strategy="dp", global_batch=4, tp=2,
        pipelines=[PipelinePlan(stages=stage, batch=2), PipelinePlan(stages=other, batch=2)],
    )  # fmt: skip
    grad = comm.GradBucket(nbytes=50_000_000, last_layer=0)
    [bucket] = _sync_buckets(plan, cluster, 0, [grad])
    link = cluster.link("a.0", "b.0")
    overhead = cluster.collective_overhead_s
    assert bucket.duration_s == pytest.approx(
        2 * link.latency_s + 2 * 50e6 / link.bandwidth + overhead
    )
