"""Pipelines of sharded stages (hybrid with ``shard_stages``) priced as sharded data
parallelism stage by stage: a one-stage hybrid is priced as ``fsdp`` on the same replicas
(another code path), and a stage's state is its replicas' shards of that stage alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.sharded import padded_shard_bytes
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef
from hetplan.predict import plan_from_options, predict
from hetplan.predict.sharded import layer_tensors, rank_breakpoints, state_parts

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"


@pytest.mark.parametrize("zero", [2, 3])
def test_one_stage_hybrid_is_priced_as_fsdp(zero: int) -> None:
    cluster = load_cluster(CLUSTERS / "local-cpu-hetero.yaml")
    ref = ModelRef(name="resnet-tiny", dataset="cifar10")
    graph = build_graph(ref)
    compute = AnalyticalCompute()
    fsdp = plan_from_options(graph, cluster, model=ref, strategy="fsdp", batch=24,
                             optimizer="adam", compute=compute, zero=zero)  # fmt: skip
    hybrid = replace(fsdp, strategy="hybrid", shard_stages=True)
    a, b = predict(fsdp, graph, cluster, compute), predict(hybrid, graph, cluster, compute)
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    for x, y in zip(a.devices, b.devices, strict=True):
        assert y.memory == pytest.approx(x.memory, rel=1e-9)


def test_a_stage_holds_its_shard_of_its_own_layers() -> None:
    """2 pipelines x 2 stages, fp32 SGD: each rank's weights are the padded half of its
    stage's tensors (FSDP2's dim-0 chunks, counted here per tensor)."""
    cluster = load_cluster(CLUSTERS / "local-cpu-4on2.yaml")
    ref = ModelRef(name="resnet-tiny", dataset="cifar10")
    graph = build_graph(ref)
    compute = AnalyticalCompute()
    plan = plan_from_options(graph, cluster, model=ref, strategy="hybrid", batch=16, dp=2,
                             pp=2, compute=compute, shard_stages=True)  # fmt: skip
    pred = predict(plan, graph, cluster, compute)
    names = [x.name for x in graph.layers]
    for pipe in plan.pipelines:
        for stage in pipe.stages:
            layers = graph.layers[names.index(stage.layers[0]) : names.index(stage.layers[-1]) + 1]
            shard = sum(padded_shard_bytes(t, 2) for x in layers for t in layer_tensors(x))
            dev = next(d for d in pred.devices if d.id == stage.devices[0])
            assert dev.memory["weights"] == pytest.approx(shard)


@pytest.mark.parametrize(("model", "n"), [("resnet-tiny", 7), ("gpt-tiny", 5), ("gpt-tiny", 300)])
def test_ranks_between_breakpoints_hold_the_same(model: str, n: int) -> None:
    """Brute force: every rank's state equals that of the first rank of its run, and the
    first ranks of two runs differ somewhere (the runs are not merely cut finer)."""
    graph = build_graph(ModelRef(name=model, dataset="cifar10" if model != "gpt-tiny" else None))
    cuts = rank_breakpoints(graph.layers, n)
    parts = [state_parts(graph, n, "adam", zero=3, rank=r) for r in range(n)]
    for r in range(n):
        first = max([b for b in cuts if b <= r], default=0)
        assert parts[r] == parts[first], (r, first)
    assert len({tuple(parts[max([b for b in cuts if b <= r], default=0)].values())
                for r in range(n)}) > 1  # fmt: skip
