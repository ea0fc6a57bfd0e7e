"""Weights tied across pipeline stages (gpt-tiny's embedding and head): the later stage's copy
and its wait for the synchronised gradient, hand-counted, in the prediction and the screening
alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.ties import stage_tied_params, tie_sync_s
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.plan.context import Context
from hetplan.plan.pricing import Pricing
from hetplan.plan.slots import stage_costs
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict.plan_memory import plan_memory
from hetplan.predict.price import price

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
VOCAB, HIDDEN = 1000, 128  # gpt-tiny (graph/zoo/gpt.py): the tied wte is vocab x hidden
TIED = VOCAB * HIDDEN
RANGES = [(0, 2), (3, 5)]  # embed, block0, block1 | block2, block3, head


def _untied(graph: ModelGraph) -> ModelGraph:
    layers = tuple(dataclasses.replace(x, shared_params=0, shared_owner=-1) for x in graph.layers)
    return dataclasses.replace(graph, layers=layers)


def _plan(graph: ModelGraph, devices: list[str]) -> Plan:
    stages = [
        StagePlan(layers=[x.name for x in graph.layers[lo : hi + 1]], devices=[d])
        for (lo, hi), d in zip(RANGES, devices, strict=True)
    ]
    return Plan(
        model=ModelRef(name="gpt-tiny"), strategy="gpipe", global_batch=4, micro_batches=2,
        pipelines=[PipelinePlan(stages=stages, batch=4)], optimizer="adam",
    )  # fmt: skip


def test_the_head_shares_the_embedding() -> None:
    graph = build_graph("gpt-tiny")
    head = graph.layers[-1]
    assert (head.shared_params, head.shared_owner) == (TIED, 0)
    assert all(x.shared_params == 0 for x in graph.layers[:-1])
    assert stage_tied_params(graph, RANGES, 0) == 0
    assert stage_tied_params(graph, RANGES, 1) == TIED
    assert stage_tied_params(graph, [(0, 5)], 0) == 0  # one stage: no copy


def test_the_copy_is_in_the_later_stage_memory() -> None:
    graph = build_graph("gpt-tiny")
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    devices = [cluster.devices[0].id, cluster.devices[-1].id]
    plan = _plan(graph, devices)

    def breakdown(g: ModelGraph, d: str) -> tuple[float, float, float]:
        mem = plan_memory(plan, g, cluster, [RANGES], [2], [0.0, 0.0])[d].breakdown
        return mem.weights, mem.grads, mem.optimizer

    tied = breakdown(graph, devices[1])
    untied = breakdown(_untied(graph), devices[1])
    # fp32 weights and gradients, Adam's two fp32 slots: 4, 4 and 8 bytes per parameter.
    assert [a - b for a, b in zip(tied, untied, strict=True)] == pytest.approx(
        [4 * TIED, 4 * TIED, 8 * TIED]
    )
    assert breakdown(graph, devices[0]) == breakdown(_untied(graph), devices[0])


def test_the_later_stage_waits_for_the_synchronised_gradient() -> None:
    graph = build_graph("gpt-tiny")
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    devices = [cluster.devices[0].id, cluster.devices[-1].id]  # across the nodes' network
    link = cluster.link(devices[0], devices[1])
    wait = link.latency_s + 4 * TIED / link.bandwidth  # fp32 gradient, alpha-beta by hand
    assert tie_sync_s(graph, cluster, RANGES, [[d] for d in devices], 1) == pytest.approx(wait)
    assert tie_sync_s(graph, cluster, RANGES, [[d] for d in devices], 0) == 0.0
    compute = AnalyticalCompute()
    plan = _plan(graph, devices)
    tied = price(plan, graph, cluster, compute, [RANGES]).pipes[0].stages
    untied = price(plan, _untied(graph), cluster, compute, [RANGES]).pipes[0].stages
    assert tied[1].opt_s - untied[1].opt_s == pytest.approx(wait)
    assert tied[0].opt_s == untied[0].opt_s
    # The screening's stage costs carry the same wait.
    pricing = Pricing(graph=graph, cluster=cluster, compute=compute)
    ctx = Context(model=ModelRef(name="gpt-tiny"), graph=graph, pricing=pricing, batch=4,
                  optimizer="adam")  # fmt: skip
    costs = stage_costs(ctx, [(devices, 2)], [(0, 3), (3, 6)])
    assert costs.opt[1] == pytest.approx(tied[1].opt_s)
