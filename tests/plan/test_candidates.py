"""Candidate generators: batch split, accumulation, pipelines, hybrids, baselines, refine.

Synthetic models of pure compute-bound layers on devices whose peak FLOP/s differ by exact
factors make the device speeds exact ratios; a real model (vgg11 on CIFAR-10) on the shipped
two-node cluster checks the same structural properties end to end through ``predict``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.cost.comm import ps_sync_time
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.memory import FRAMEWORK_OVERHEAD_BYTES
from hetplan.graph import build_graph
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.plan.candidates import (
    coarse_count,
    dp_candidate,
    equal_pipeline,
    hybrid_candidates,
    micro_counts,
    pipeline_at,
    pipeline_candidates,
    ps_candidate,
    refine,
)
from hetplan.plan.context import Candidate, Context
from hetplan.plan.pricing import Pricing
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import predict
from hetplan.serde import from_data, to_data

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
FLOPS_PER_SAMPLE = 1e9  # per layer and pass: compute-bound on every synthetic device
PIPELINED = ("gpipe", "1f1b", "pipedream")

# ------------------------------------------------------------------ synthetic model/cluster


def syn_graph(n: int = 8, saved: int = 1000, cut: int = 1000, params: int = 1000) -> ModelGraph:
    layers = tuple(
        LayerInfo(
            name=f"l{i}",
            fwd_flops=FLOPS_PER_SAMPLE,
            bwd_flops=2 * FLOPS_PER_SAMPLE,
            params=params,
            param_bytes=4 * params,
            param_tensor_bytes=(4 * params,),
            out_bytes=cut,
            saved_bytes=saved,
            fwd_io_bytes=0,
            bwd_io_bytes=0,
        )
        for i in range(n)
    )
    return ModelGraph(
        name="syn",
        input_shape=(1,),
        input_bytes=cut,
        dtype="fp32",
        layers=layers,
        cut_bytes=(cut,) * (n - 1),
    )


def dev_type(name: str, tflops: float, memory: float = 16e9) -> DeviceType:
    return DeviceType(
        name=name,
        peak_flops={"fp32": tflops * 1e12},
        memory_bandwidth=1e12,
        memory_bytes=memory,
        idle_power_w=20.0,
        max_power_w=200.0,
    )


def syn_cluster(nodes: Sequence[tuple[str, DeviceType, int]]) -> Cluster:
    devices = tuple(
        Device(id=f"{node}.{i}", type=t, node=node, index=i)
        for node, t, count in nodes
        for i in range(count)
    )
    fast = Link(kind="nvlink", bandwidth=100e9, latency_s=1e-6)
    slow = Link(kind="eth", bandwidth=1e9, latency_s=1e-5)
    names = [n for n, _, _ in nodes]
    return Cluster(
        name="syn",
        devices=devices,
        intra_links=dict.fromkeys(names, fast),
        network=dict.fromkeys(names, slow),
    )


def context(graph: ModelGraph, cluster: Cluster, batch: int) -> Context:
    pricing = Pricing(graph=graph, cluster=cluster, compute=AnalyticalCompute())
    return Context(model=ModelRef(name=graph.name), graph=graph, pricing=pricing, batch=batch)


def check_plan(ctx: Context, cand: Candidate, *, feasible: bool = True) -> None:
    """The plan round-trips through JSON with validation and ``predict`` prices it."""
    plan = cand.plan
    assert from_data(Plan, to_data(plan), "test") == plan
    assert plan.global_batch == ctx.batch == sum(p.batch for p in plan.pipelines)
    pred = predict(plan, ctx.graph, ctx.pricing.cluster, ctx.pricing.compute)
    assert pred.feasible is feasible, pred.infeasible_reasons
    assert pred.iteration_time_s > 0


def layers_of(pipe: object) -> list[str]:
    return [name for s in pipe.stages for name in s.layers]  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ data parallel


def test_dp_batch_split_follows_device_speed() -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 1), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(), c, batch=64)
    cand = dp_candidate(ctx, ["a.0", "b.0", "b.1"])
    assert cand is not None
    # weights 2:1:1, largest remainder over 64 - 3: 30.5, 15.25, 15.25 -> 32, 16, 16
    assert [p.batch for p in cand.plan.pipelines] == [32, 16, 16]
    assert [p.stages[0].devices for p in cand.plan.pipelines] == [["a.0"], ["b.0"], ["b.1"]]
    assert cand.plan.micro_batches == 1 and cand.baseline is None
    # the compute of every replica takes the same time
    busy = [ctx.pricing.step_time(d, b) for d, b in (("a.0", 32), ("b.0", 16))]
    assert busy[0] == pytest.approx(busy[1], rel=1e-6)
    check_plan(ctx, cand)


def test_dp_two_devices_twice_as_fast_gets_twice_the_batch() -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 1), ("b", dev_type("S", 1.0), 1)])
    ctx = context(syn_graph(), c, batch=30)
    cand = dp_candidate(ctx, ["a.0", "b.0"])
    assert cand is not None
    assert [p.batch for p in cand.plan.pipelines] == [20, 10]


def test_dp_equal_baseline_splits_equally_and_is_slower() -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 1), ("b", dev_type("S", 1.0), 1)])
    ctx = context(syn_graph(), c, batch=30)
    equal = dp_candidate(ctx, ["a.0", "b.0"], equal=True)
    by_speed = dp_candidate(ctx, ["a.0", "b.0"])
    assert equal is not None and by_speed is not None
    assert [p.batch for p in equal.plan.pipelines] == [15, 15]
    assert equal.baseline == "dp-equal"
    # equal split: the slow device computes 15 samples, by speed 10 -> 1.5x the compute
    assert equal.estimate.time_s > 1.4 * by_speed.estimate.time_s
    check_plan(ctx, equal)


MiB = 1024 * 1024
SAVED_PER_LAYER = 1_000_000  # bytes per sample per layer: 4 layers -> 4 MB per sample


@pytest.mark.parametrize(
    ("headroom", "expected"),
    [(16e9, 1), (40e6, 2), (20e6, 4), (10e6, 8)],
)
def test_dp_accumulates_only_when_memory_is_short(headroom: float, expected: int) -> None:
    # 16 samples per replica need 64 MB of activations (+ 48 kB of weights, grads, buckets);
    # m micro-batches need 64/m MB: the fewest power of two that fits in the headroom.
    t = dev_type("X", 1.0, memory=FRAMEWORK_OVERHEAD_BYTES + headroom)
    ctx = context(syn_graph(n=4, saved=SAVED_PER_LAYER), syn_cluster([("a", t, 2)]), batch=32)
    cand = dp_candidate(ctx, ["a.0", "a.1"])
    assert cand is not None
    assert cand.plan.micro_batches == expected
    assert ("micro-batches" in cand.label) is (expected > 1)
    check_plan(ctx, cand)


def test_dp_accumulation_slows_the_estimate() -> None:
    graph = syn_graph(n=4, saved=SAVED_PER_LAYER)
    roomy = context(graph, syn_cluster([("a", dev_type("X", 1.0), 2)]), batch=32)
    tight_type = dev_type("X", 1.0, memory=FRAMEWORK_OVERHEAD_BYTES + 20e6)
    tight = context(graph, syn_cluster([("a", tight_type, 2)]), batch=32)
    a, b = dp_candidate(roomy, ["a.0", "a.1"]), dp_candidate(tight, ["a.0", "a.1"])
    assert a is not None and b is not None
    assert b.plan.micro_batches == 4
    assert b.estimate.time_s >= a.estimate.time_s  # same samples, more kernel rounds


def test_dp_none_when_one_sample_does_not_fit() -> None:
    t = dev_type("X", 1.0, memory=FRAMEWORK_OVERHEAD_BYTES + 1e6)  # one sample needs 4 MB
    ctx = context(syn_graph(n=4, saved=SAVED_PER_LAYER), syn_cluster([("a", t, 2)]), batch=32)
    assert dp_candidate(ctx, ["a.0", "a.1"]) is None


def test_ps_candidate_shards_on_every_worker() -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 1), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(), c, batch=32)
    devices = ["a.0", "b.0", "b.1"]
    dp = dp_candidate(ctx, devices)
    assert dp is not None
    ps = ps_candidate(ctx, devices, dp)
    assert ps.family == "ps" and ps.plan.strategy == "ps"
    assert ps.plan.ps_devices == devices
    assert ps.plan.pipelines == dp.plan.pipelines
    # the estimate adds the shards' push and pull after the slowest worker's compute
    slowest = max(
        ctx.pricing.step_time(d, p.batch) for d, p in zip(devices, dp.plan.pipelines, strict=True)
    )
    sizes = [b for layer in ctx.graph.layers for b in (layer.param_tensor_bytes or [])]
    sync = ps_sync_time(sizes, devices, devices, c, policy="size").sync_s
    assert sync > 0
    assert ps.estimate.time_s == pytest.approx(slowest + sync)
    check_plan(ctx, ps)


# --------------------------------------------------------------------------------- pipelines


def test_micro_batch_counts_by_hand() -> None:
    assert micro_counts(4, 64) == [4, 8, 16]
    assert micro_counts(4, 6) == [6]  # 4 does not divide 6: the next divisor
    assert micro_counts(3, 2) == [2]
    assert micro_counts(64, 512) == [64, 128]  # capped at MAX_MICROBATCHES beyond S
    assert coarse_count(4, 64) == 8
    assert coarse_count(4, 3) == 3
    assert coarse_count(3, 16) == 8  # 2S = 6 does not divide 16: the next divisor
    for stages in range(1, 9):
        for batch in (1, 6, 16, 30, 64, 100):
            assert all(batch % m == 0 for m in micro_counts(stages, batch))


def _assert_pipeline_shape(ctx: Context, cand: Candidate, offered: Sequence[str]) -> None:
    plan = cand.plan
    assert len(plan.pipelines) == 1
    pipe = plan.pipelines[0]
    assert layers_of(pipe) == ctx.layer_names  # contiguous, in order, all covered
    assert all(len(s.layers) >= 1 and len(s.devices) == 1 for s in pipe.stages)
    used = plan.devices
    assert len(set(used)) == len(used) and set(used) <= set(offered)
    # stages keep the slot order the partitioner worked on (skipped slots allowed)
    order = cand.slots[0]
    positions = [order.index(d) for d in used]
    assert positions == sorted(positions)
    assert 1 <= plan.micro_batches <= ctx.batch


def test_pipelines_on_synthetic_cluster() -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 2), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(n=12), c, batch=32)
    devices = ["a.0", "a.1", "b.0", "b.1"]
    cands = pipeline_candidates(ctx, devices, list(PIPELINED))  # type: ignore[arg-type]
    # two stage orders (fast node first, slow node first) x three strategies
    assert sorted(c.family for c in cands) == sorted(PIPELINED * 2)
    assert {c.slots[0] for c in cands} == {
        ("a.0", "a.1", "b.0", "b.1"),
        ("b.1", "b.0", "a.1", "a.0"),
    }
    for cand in cands:
        assert cand.plan.strategy == cand.family
        assert cand.plan.micro_batches == coarse_count(4, 32) == 8
        _assert_pipeline_shape(ctx, cand, devices)
        check_plan(ctx, cand)
        # twice as fast devices get about twice the layers (compute dominates the cut)
        per_dev = {s.devices[0]: len(s.layers) for s in cand.plan.pipelines[0].stages}
        assert per_dev.get("a.0", 0) + per_dev.get("a.1", 0) == 8


def test_pipelines_of_a_real_model_on_the_two_node_cluster() -> None:
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    ref = ModelRef(name="vgg11", dataset="cifar10")
    graph = build_graph(ref)
    pricing = Pricing(graph=graph, cluster=cluster, compute=AnalyticalCompute())
    ctx = Context(model=ref, graph=graph, pricing=pricing, batch=64)
    devices = [d.id for d in cluster.devices]
    cands = pipeline_candidates(ctx, devices, list(PIPELINED))  # type: ignore[arg-type]
    assert {c.family for c in cands} == set(PIPELINED)
    for cand in cands:
        _assert_pipeline_shape(ctx, cand, devices)
        check_plan(ctx, cand)
    hybrids = hybrid_candidates(ctx, devices)
    assert hybrids
    for cand in hybrids:
        _assert_hybrid_shape(ctx, cand)
        check_plan(ctx, cand)

    # one virtual worker per node is among the groupings (HetPipe)
    def nodes(h: Candidate) -> list[set[str]]:
        return [
            {cluster.device(d).node for s in p.stages for d in s.devices} for p in h.plan.pipelines
        ]

    assert any(sorted(map(sorted, nodes(h))) == [["t4"], ["v100"]] for h in hybrids)


def test_recompute_only_when_activations_do_not_fit() -> None:
    # 8 layers of 1 MB saved per sample; gpipe keeps all m micro-batches in flight.
    graph = syn_graph(n=8, saved=1_000_000, cut=1_000_000)
    roomy = context(graph, syn_cluster([("a", dev_type("X", 1.0), 2)]), batch=16)
    slots = (("a.0", "a.1"),)
    plain = pipeline_at(roomy, "gpipe", slots, 4)
    assert plain is not None and plain.plan.recompute is False
    # 4 layers x 16 samples in flight = 64 MB per stage; recompute keeps 4 stage inputs of
    # 4 samples (16 MB) plus one micro-batch's 16 MB: 32 MB fits in 40 MB, 64 MB does not.
    # (plus predict's backward workspace, two 4 MB activation gradients, and the last
    # stage's input batch, 16 samples of 1 MB: 60 MB holds it)
    tight_type = dev_type("X", 1.0, memory=FRAMEWORK_OVERHEAD_BYTES + 60e6)
    tight = context(graph, syn_cluster([("a", tight_type, 2)]), batch=16)
    redo = pipeline_at(tight, "gpipe", slots, 4)
    assert redo is not None and redo.plan.recompute is True
    assert "recompute" in redo.label
    assert redo.estimate.time_s == pytest.approx(plain.estimate.time_s * 4 / 3, rel=1e-9)
    _assert_pipeline_shape(tight, redo, slots[0])
    check_plan(tight, redo)
    # nothing fits even with recomputation: no candidate
    tiny = dev_type("X", 1.0, memory=FRAMEWORK_OVERHEAD_BYTES + 5e6)
    assert pipeline_at(context(graph, syn_cluster([("a", tiny, 2)]), 16), "gpipe", slots, 4) is None


def test_refine_tries_every_other_micro_batch_count() -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 2), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(n=12), c, batch=64)
    cand = pipeline_candidates(ctx, ["a.0", "a.1", "b.0", "b.1"], ["1f1b"], orders=1)[0]
    assert cand.plan.micro_batches == 8
    others = refine(ctx, cand)
    assert sorted(o.plan.micro_batches for o in others) == [4, 16]
    assert all(o.slots == cand.slots and o.family == "1f1b" for o in others)
    dp = dp_candidate(ctx, ["a.0"])
    assert dp is not None and refine(ctx, dp) == []  # nothing to refine without slots


# ------------------------------------------------------------------------------------ hybrid


def _assert_hybrid_shape(ctx: Context, cand: Candidate) -> None:
    plan = cand.plan
    assert plan.strategy == "hybrid" and cand.family == "hybrid"
    assert len(plan.pipelines) >= 2
    bounds = {tuple(tuple(s.layers) for s in p.stages) for p in plan.pipelines}
    assert len(bounds) == 1  # equal stage boundaries (whole layer lists, not just starts)
    for pipe in plan.pipelines:
        assert layers_of(pipe) == ctx.layer_names
        assert pipe.batch >= plan.micro_batches
    assert sum(p.batch for p in plan.pipelines) == ctx.batch
    used = plan.devices
    assert len(set(used)) == len(used)


def test_hybrid_virtual_workers_on_synthetic_cluster() -> None:
    c = syn_cluster([("a", dev_type("F", 3.0), 2), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(n=12), c, batch=64)
    devices = ["a.0", "a.1", "b.0", "b.1"]
    cands = hybrid_candidates(ctx, devices)
    # by node ([F F] / [S S]) and Algorithm 2 with 2 groups ([F S] x 2)
    assert len(cands) == 2
    for cand in cands:
        _assert_hybrid_shape(ctx, cand)
        check_plan(ctx, cand)
    by_node = next(h for h in cands if sorted(h.slots) == [("a.0", "a.1"), ("b.0", "b.1")])
    # batch in proportion to the virtual workers' summed speed 6:2 -> 48:16 (largest remainder)
    assert sorted(p.batch for p in by_node.plan.pipelines) == [16, 48]
    balanced = next(h for h in cands if h is not by_node)
    assert [p.batch for p in balanced.plan.pipelines] == [32, 32]
    assert all({d[0] for d in s} == {"a", "b"} for s in balanced.slots)


# ---------------------------------------------------------------------------------- baseline


@pytest.mark.parametrize(("layers", "devices"), [(12, 4), (13, 4), (8, 3), (3, 4)])
def test_equal_pipeline_has_equal_layer_counts(layers: int, devices: int) -> None:
    c = syn_cluster([("a", dev_type("F", 2.0), 2), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(n=layers), c, batch=32)
    ids = ["b.0", "a.0", "b.1", "a.1"][:devices]
    cand = equal_pipeline(ctx, ids)
    assert cand.baseline == "equal-pipeline" and cand.plan.strategy == "gpipe"
    pipe = cand.plan.pipelines[0]
    counts = [len(s.layers) for s in pipe.stages]
    stages = min(layers, devices)
    assert len(counts) == stages
    base, extra = divmod(layers, stages)
    assert counts == [base + 1] * extra + [base] * (stages - extra)
    assert [s.devices[0] for s in pipe.stages] == ids[:stages]  # given order, not reordered
    assert layers_of(pipe) == ctx.layer_names
    check_plan(ctx, cand)


def test_equal_pipeline_is_no_better_than_the_partitioned_one() -> None:
    c = syn_cluster([("a", dev_type("F", 4.0), 2), ("b", dev_type("S", 1.0), 2)])
    ctx = context(syn_graph(n=16), c, batch=32)
    ids = ["a.0", "a.1", "b.0", "b.1"]
    base = equal_pipeline(ctx, ids)
    m = base.plan.micro_batches
    tuned = pipeline_at(ctx, "gpipe", (tuple(ids),), m)
    assert tuned is not None
    p_base = predict(base.plan, ctx.graph, c, ctx.pricing.compute)
    p_tuned = predict(tuned.plan, ctx.graph, c, ctx.pricing.compute)
    assert p_tuned.iteration_time_s < p_base.iteration_time_s
    assert math.isfinite(p_base.iteration_time_s)
