"""predict() with the real graph extraction and cluster loader: every strategy on the shipped
example clusters for small zoo models."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef
from hetplan.predict import plan_from_options, predict

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
STRATEGIES: list[tuple[str, dict[str, object]]] = [
    ("dp", {}),
    ("ps", {}),
    ("gpipe", {"pp": 2}),
    ("1f1b", {"pp": 2}),
    ("pipedream", {"pp": 2}),
    ("hybrid", {"pp": 2}),
    ("hybrid", {"pp": 2, "sync": "wsp", "staleness": 1}),
    ("fsdp", {}),
    ("fsdp", {"zero": 1}),
]


@pytest.mark.parametrize("cluster_file", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
@pytest.mark.parametrize("model", ["vgg11", "gpt2"])
def test_every_strategy_on_every_example_cluster(cluster_file: str, model: str) -> None:
    cluster = load_cluster(CLUSTERS / cluster_file)
    dataset = "cifar10" if model == "vgg11" else None
    ref = ModelRef(name=model, dataset=dataset)
    graph = build_graph(ref)
    compute = AnalyticalCompute()
    n = len(cluster.devices)
    for strategy, kw in STRATEGIES:
        if strategy == "hybrid" and n < 4:
            continue
        devices = [d.id for d in cluster.devices][: 2 if "pp" in kw and strategy != "hybrid" else n]
        if strategy == "hybrid":
            devices = devices[: n - n % 2]
        plan = plan_from_options(
            graph,
            cluster,
            model=ref,
            strategy=strategy,
            batch=64,
            devices=devices,
            compute=compute,
            **kw,
        )  # type: ignore[arg-type]
        pred = predict(plan, graph, cluster, compute, dataset_size=50_000)
        assert pred.iteration_time_s > 0, (strategy, kw)
        assert pred.samples_per_s == pytest.approx(64 / pred.iteration_time_s)
        assert pred.epoch_time_s == pytest.approx(782 * pred.iteration_time_s)
        assert {d.id for d in pred.devices} >= set(plan.devices)
        assert pred.cost_source == "analytical"


def test_gpt2_xl_on_one_t4_does_not_fit() -> None:
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    ref = ModelRef(name="gpt2-xl")
    graph = build_graph(ref)
    compute = AnalyticalCompute()
    plan = plan_from_options(
        graph, cluster, model=ref, strategy="dp", batch=1, devices=["t4.0"], optimizer="adam"
    )
    pred = predict(plan, graph, cluster, compute)
    assert not pred.feasible
    assert pred.infeasible_reasons[0].startswith("t4.0: out of memory: needs ")
    (dev,) = pred.devices
    # 1.5 B parameters with Adam: weights + grads + 2 moments = 16 B/param > 16 GiB.
    assert dev.memory_bytes > 16 * graph.total_params > dev.memory_capacity_bytes
