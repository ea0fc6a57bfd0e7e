"""The exactness grid: on clusters small enough to search exhaustively, the planner's pick is
within GAP_LIMIT of the optimum of its space (issue 27, item 4, "exact where it can be").

The expected value is brute force: ``plan.exhaustive.exhaustive_search`` simulates every
candidate of the space (every subset orbit, every stage order and micro-batch count, TP on
every subset), as ``benchmarks/bench_exactness.py`` does for its 60 cases. The grid is the
cheap part of that benchmark, with the cluster where the planner used to miss: on gen-mixed
(two device types inside each node, 1 GbE) it picked data parallel 5.6% (mobilenetv2) and
29.6% (vgg11) slower than PipeDream on 4 of the 8 devices, a subset the balanced bound ranked
21st of 42, too low to be screened for pipelines (fails at ab582df, before issue 27's fix).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.plan.classes import orbit_count, symmetry
from hetplan.plan.exhaustive import exhaustive_search
from hetplan.plan.objective import parse_objective
from hetplan.plan.search import Ranked, Ranking, SearchOptions, search
from hetplan.plan.subsets import MAX_EXHAUSTIVE_SUBSETS
from hetplan.planspec import ModelRef

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
GAP_LIMIT = 0.02
"""Largest excess of the planner's best score over the exhaustive optimum (issue 27's bound)."""
ROUNDING = 1e-9
"""Relative slack for float noise when the planner must not beat the exhaustive optimum."""
GEN_MIXED = """
name: gen-mixed
nodes:
  - {name: m0, devices: [{type: A10G, count: 2}, {type: L4, count: 2}], link: {type: PCIe4x16}}
  - {name: m1, devices: [{type: A10G, count: 2}, {type: L4, count: 2}], link: {type: PCIe4x16}}
network: {type: 1GbE}
"""
"""bench_exactness.py's gen-mixed: 8 devices, 45 orbits."""
MODELS = {
    # zoo name: (dataset, global batch), as in bench_exactness.py
    "gpt-tiny": (None, 128),  # tensor-parallel units: TP candidates compete
    "mobilenetv2": ("cifar10", 128),
    "vgg11": ("cifar10", 128),
}
CLUSTER_NAMES = ("edge", "hetero-2node", "gen-mixed")
OBJECTIVES = ("time", "energy")
"""bench_exactness.py's objectives. Simulating every candidate does not depend on the
objective, so one exhaustive run per (model, cluster) serves both: the optimum is the best
score of its ranked candidates under each."""


@functools.cache
def _ref(model: str) -> ModelRef:
    return ModelRef(name=model, dataset=MODELS[model][0])


@functools.cache
def _graph(model: str) -> ModelGraph:
    return build_graph(_ref(model))


@functools.cache
def _cluster(name: str, scratch: Path) -> Cluster:
    if name == "gen-mixed":
        path = scratch / "gen-mixed.yaml"
        path.write_text(GEN_MIXED.lstrip())
        return load_cluster(path)
    return load_cluster(CLUSTERS / f"{name}.yaml")


def _options(model: str, objective: str) -> SearchOptions:
    return SearchOptions(batch=MODELS[model][1], objective=parse_objective(objective))


def _search(model: str, cluster: Cluster, objective: str, *, exhaustive: bool = False) -> Ranking:
    run = exhaustive_search if exhaustive else search
    args = (_ref(model), _graph(model), cluster, AnalyticalCompute(), _options(model, objective))
    return run(*args)


def _optimum(reference: Ranking, objective: str) -> Ranked:
    """The best of every simulated feasible candidate under ``objective``: of those that fit
    with the feasibility margin when there are any (the search ranks a plan that may not fit
    after every plan that fits, docs/planning.md)."""
    fit = [r for r in reference.ranked if r.prediction.memory_verdict == "fits"]
    pool = fit or reference.ranked
    scores = parse_objective(objective).scores([r.metrics for r in pool])
    return pool[min(range(len(scores)), key=scores.__getitem__)]


def _describe(r: Ranked) -> str:
    return f"{r.candidate.label} on {len(r.candidate.plan.devices)} devices"


@pytest.mark.parametrize("cluster_name", CLUSTER_NAMES)
@pytest.mark.parametrize("model", MODELS)
def test_pick_is_within_2_percent_of_the_exhaustive_optimum(
    model: str, cluster_name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cluster = _cluster(cluster_name, tmp_path_factory.getbasetemp())
    reference = _search(model, cluster, OBJECTIVES[0], exhaustive=True)
    for objective in OBJECTIVES:
        heuristic = _search(model, cluster, objective)
        best, optimum = heuristic.best, _optimum(reference, objective)
        score = parse_objective(objective).scores([optimum.metrics])[0]
        gap = best.score / score - 1
        assert gap <= GAP_LIMIT, (
            f"{objective}: {_describe(best)} is {100 * gap:.1f}% from the optimum, "
            f"{_describe(optimum)}"
        )
        # The planner searches a part of the reference's space: beating it means the
        # reference is not exhaustive, and the bound above would prove nothing.
        assert gap >= -ROUNDING, objective
        assert heuristic.simulated < reference.simulated


def test_the_grid_is_in_the_exact_regime(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The claim is about the exact regime (every subset orbit enumerated): every cluster of
    the grid must be in it, or the grid tests another regime than it says."""
    for name in CLUSTER_NAMES:
        sym = symmetry(_cluster(name, tmp_path_factory.getbasetemp()))
        assert orbit_count(sym) <= MAX_EXHAUSTIVE_SUBSETS, name
