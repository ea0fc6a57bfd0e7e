"""The screening's closed forms count a CPU stage's transfers on its cores as the simulator
does (``StageCosts.held``): on one node of CPU ranks, GPipe and PipeDream estimates equal the
simulated time, 1F1B stays in its band. Without them the estimates were 0.62-0.68x."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.plan.context import Context
from hetplan.plan.objective import parse_objective
from hetplan.plan.options import SearchOptions
from hetplan.plan.pricing import Pricing
from hetplan.plan.screen import screen
from hetplan.planspec import ModelRef
from hetplan.predict import predict

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu.yaml"
BANDS = {"gpipe": (0.9999, 1.0001), "pipedream": (0.9999, 1.0001), "1f1b": (0.92, 1.075)}


@pytest.mark.parametrize("model", ["vgg11", "resnet-tiny"])
def test_cpu_pipelines_are_screened_as_simulated(model: str) -> None:
    graph = build_graph(model, dataset="cifar10")
    cluster = load_cluster(CLUSTER)
    compute = AnalyticalCompute()
    pricing = Pricing(graph=graph, cluster=cluster, compute=compute)
    ctx = Context(model=ModelRef(name=model, dataset="cifar10"), graph=graph, pricing=pricing,
                  batch=32, optimizer="sgd")  # fmt: skip
    opts = SearchOptions(batch=32, objective=parse_objective("time"), optimizer="sgd",
                         runnable_only=False)  # fmt: skip
    seen = Counter[str]()
    for cand in screen(ctx, cluster, opts, Counter(), None):
        if cand.family not in BANDS:
            continue
        ratio = cand.estimate.time_s / predict(cand.plan, graph, cluster, compute).iteration_time_s
        lo, hi = BANDS[cand.family]
        assert lo <= ratio <= hi, (cand.label, ratio)
        seen[cand.family] += 1
    assert set(seen) == set(BANDS)
