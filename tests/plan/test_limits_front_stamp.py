"""--min-devices / --all-devices limits, the objective-independent Pareto front, and the
cluster stamp of a plan file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.errors import InputError
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.plan.objective import Limits, parse_objective
from hetplan.plan.search import Ranking, SearchOptions, search
from hetplan.plan.stamp import check_cluster, cluster_digest, stamped
from hetplan.planspec import ModelRef

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
REF = ModelRef(name="gpt-tiny")


@pytest.fixture(scope="module")
def graph() -> ModelGraph:
    return build_graph(REF)


@pytest.fixture(scope="module")
def hetero() -> Cluster:
    return load_cluster(CLUSTERS / "hetero-2node.yaml")


def _search(graph: ModelGraph, cluster: Cluster, objective: str = "time", **limits: int) -> Ranking:
    opts = SearchOptions(batch=64, objective=parse_objective(objective), limits=Limits(**limits))
    return search(ModelRef(name=graph.name), graph, cluster, AnalyticalCompute(), opts)


def test_without_a_floor_the_winner_leaves_devices_out(graph: ModelGraph, hetero: Cluster) -> None:
    """The premise of the next tests: on this cluster the fastest plan uses the V100s only."""
    assert _search(graph, hetero).best.metrics.devices < len(hetero.devices)


@pytest.mark.parametrize("floor", [5, 8])
def test_min_devices_is_met_by_every_ranked_plan(
    floor: int, graph: ModelGraph, hetero: Cluster
) -> None:
    ranking = _search(graph, hetero, min_devices=floor)
    assert ranking.ranked
    assert all(r.metrics.devices >= floor for r in ranking.ranked)


@pytest.mark.parametrize("model", ["gpt-tiny", "vgg11"])
def test_pareto_front_ends_do_not_depend_on_the_objective(model: str, hetero: Cluster) -> None:
    """The estimated front is simulated whatever the objective: the fastest and the most
    frugal plan of the front are the same for time, energy and edp (before, an energy
    objective never simulated the fastest plans)."""
    graph = build_graph(ModelRef(name=model))
    fronts = [
        [(r.metrics.time_s, r.metrics.energy_j) for r in _search(graph, hetero, obj).pareto]
        for obj in ("time", "energy", "edp")
    ]
    assert all(len(f) >= 3 for f in fronts)
    assert fronts[0][0] == fronts[1][0] == fronts[2][0]
    assert fronts[0][-1] == fronts[1][-1] == fronts[2][-1]


def _retyped(cluster: Cluster, index: int, other: Cluster) -> Cluster:
    devices = list(cluster.devices)
    devices[index] = dataclasses.replace(devices[index], type=other.devices[0].type)
    return dataclasses.replace(cluster, devices=tuple(devices))


def test_digest_ignores_links_but_not_device_types(hetero: Cluster) -> None:
    faster = dataclasses.replace(
        hetero,
        network={k: dataclasses.replace(v, bandwidth=2 * v.bandwidth)
                 for k, v in hetero.network.items()},
    )  # fmt: skip
    assert cluster_digest(faster) == cluster_digest(hetero)
    edge = load_cluster(CLUSTERS / "edge.yaml")
    assert cluster_digest(_retyped(hetero, 7, edge)) != cluster_digest(hetero)


def test_check_cluster_refuses_another_cluster(graph: ModelGraph, hetero: Cluster) -> None:
    plan = stamped(_search(graph, hetero).best.candidate.plan, hetero)
    check_cluster(plan, hetero, where="p.json", option="--other-cluster")  # same: passes
    edge = load_cluster(CLUSTERS / "edge.yaml")
    with pytest.raises(InputError, match=r"p\.json was made for cluster 'hetero-2node'.*--other"):
        check_cluster(plan, _retyped(hetero, 0, edge), where="p.json", option="--other-cluster")
    unstamped = dataclasses.replace(plan, cluster_digest=None)
    check_cluster(unstamped, edge, where="p.json", option="--other-cluster")  # old files pass
