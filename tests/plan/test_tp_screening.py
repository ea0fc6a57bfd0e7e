"""Tensor parallelism is offered from the model's structure (``LayerInfo.tp_units``), not from
layer names, and for every family it runs with (dp, gpipe, 1f1b, hybrid), also when only
runnable plans are searched."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.plan.context import Candidate, Context
from hetplan.plan.objective import parse_objective
from hetplan.plan.options import SearchOptions
from hetplan.plan.pricing import Pricing
from hetplan.plan.screen import screen
from hetplan.plan.search import search, unrunnable
from hetplan.plan.tp import has_tp_units, splits_at
from hetplan.planspec import ModelRef

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu-4on2.yaml"
BATCH = 16


def _screen(model: str, families: tuple[str, ...]) -> list[Candidate]:
    cluster = load_cluster(CLUSTER)
    graph = build_graph(model)
    pricing = Pricing(graph=graph, cluster=cluster, compute=AnalyticalCompute())
    ctx = Context(model=ModelRef(name=model), graph=graph, pricing=pricing, batch=BATCH)
    opts = SearchOptions(batch=BATCH, objective=parse_objective("time"), families=families)
    assert opts.runnable_only
    return screen(ctx, cluster, opts, Counter(), None)


def test_tp_is_offered_from_structure() -> None:
    assert has_tp_units(build_graph("gpt-tiny"))
    assert has_tp_units(build_graph("bert-tiny"))  # its FFNs; the attention stays replicated
    assert not has_tp_units(build_graph("resnet-tiny"))
    assert not has_tp_units(build_graph("vgg11"))
    gpt = build_graph("gpt-tiny")
    assert splits_at(gpt, 2) and splits_at(gpt, 4)
    assert not splits_at(gpt, 8)  # 4 heads per block: no rank holds whole heads


def test_runnable_search_screens_tp_for_dp_and_pipelines() -> None:
    pool = _screen("gpt-tiny", ("dp", "gpipe", "1f1b", "hybrid"))
    tp = [c for c in pool if c.plan.tp > 1]
    assert {c.family for c in tp} == {"dp", "gpipe", "1f1b"}  # hybrids need 4 TP groups
    assert {c.plan.tp for c in tp} == {2, 4}
    assert all(unrunnable(c.plan) is None for c in tp)
    only_dp = _screen("gpt-tiny", ("dp",))
    assert {c.family for c in only_dp if c.plan.tp > 1} == {"dp"}


@pytest.mark.parametrize("model", ["resnet-tiny", "vgg11"])
def test_models_without_units_get_no_tp_candidate(model: str) -> None:
    pool = _screen(model, ("dp", "gpipe", "1f1b", "hybrid"))
    assert pool
    assert all(c.plan.tp == 1 for c in pool)


def test_screening_estimate_of_tp_tracks_the_simulation() -> None:
    """The screening prices TP with the same model as predict: a single-stage TP plan's
    estimate is its simulated time up to the screening's closed form (within 5%), once the
    simulation's time-slice tax is taken out. The screening prices ranks at their declared
    speeds; predict takes ``TIME_SLICE_TAX`` off ranks whose core-mates compute beside them,
    and on ``local-cpu-4on2`` both ranks of every TP pair share one core and compute together,
    so the whole step is ``1 / (1 - TIME_SLICE_TAX)`` slower there."""
    pool = _screen("gpt-tiny", ("dp",))
    cluster = load_cluster(CLUSTER)
    graph = build_graph("gpt-tiny")
    from hetplan.predict import predict
    from hetplan.predict.sharing import TIME_SLICE_TAX

    tp_plans = [c for c in pool if c.plan.tp > 1]
    assert tp_plans
    for cand in tp_plans:
        pred = predict(cand.plan, graph, cluster, AnalyticalCompute()).iteration_time_s
        assert cand.estimate.time_s == pytest.approx(pred * (1 - TIME_SLICE_TAX), rel=0.05)


def test_competitive_tp_plans_are_ranked_when_runnable_only() -> None:
    """gpt2-medium on 4 A100s: data parallel over two TP pairs is within 20% of the best plan
    (1.155x since causal attention counts half its score matrix: less compute beside the same
    TP all-reduces), so the runnable search simulates and ranks it."""
    cluster = load_cluster(CLUSTER.parent / "homogeneous-4gpu.yaml")
    graph = build_graph("gpt2-medium")
    opts = SearchOptions(batch=32, objective=parse_objective("time"))
    ranking = search(ModelRef(name="gpt2-medium"), graph, cluster, AnalyticalCompute(), opts)
    tp = [r for r in ranking.ranked if r.candidate.plan.tp > 1]
    assert tp, [r.candidate.label for r in ranking.ranked]
    assert all(unrunnable(r.candidate.plan) is None for r in ranking.ranked)
    assert tp[0].metrics.time_s < 1.2 * ranking.best.metrics.time_s
