"""The symmetric search space: orbits against brute force over identity-level subsets, counts
against concrete devices, and the exhaustive reference search over both.

Expected values come from brute force: every one of the 2^n device subsets, the ring
construction of the collectives, and the concrete (device by device) data-parallel screening.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.cost.comm import allreduce_time
from hetplan.cost.comm_collectives import grouped_allreduce_time
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.plan import subsets as subsets_mod
from hetplan.plan.candidates import dp_candidate
from hetplan.plan.classes import (
    Selection,
    Symmetry,
    node_level_count,
    node_levels,
    orbit_count,
    orbits,
    symmetry,
)
from hetplan.plan.context import Context
from hetplan.plan.devices import split_batch
from hetplan.plan.exhaustive import exhaustive_search
from hetplan.plan.objective import Objective
from hetplan.plan.options import SearchOptions
from hetplan.plan.pricing import Pricing
from hetplan.plan.replicas import expand, split_groups
from hetplan.plan.search import search
from hetplan.plan.subsets import dp_of, subset_space
from hetplan.planspec import ModelRef

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
FAST = Link(kind="nvlink", bandwidth=100e9, latency_s=1e-6)
PCIE = Link(kind="pcie", bandwidth=16e9, latency_s=5e-6)
ETH = Link(kind="eth", bandwidth=1e9, latency_s=1e-5)


def dev_type(name: str, tflops: float) -> DeviceType:
    return DeviceType(
        name=name,
        peak_flops={"fp32": tflops * 1e12},
        memory_bandwidth=1e12,
        memory_bytes=16e9,
        idle_power_w=20.0,
        max_power_w=200.0,
    )


X, Y = dev_type("X", 10), dev_type("Y", 4)
Node = tuple[str, Sequence[tuple[DeviceType, int]], Link]


def make(nodes: Sequence[Node], pairs: dict[tuple[str, str], Link] | None = None) -> Cluster:
    devices = []
    for name, pools, _ in nodes:
        i = 0
        for t, count in pools:
            for _ in range(count):
                devices.append(Device(id=f"{name}.{i}", type=t, node=name, index=i))
                i += 1
    return Cluster(
        name="sym",
        devices=tuple(devices),
        intra_links={n: link for n, _, link in nodes},
        network={n: ETH for n, _, _ in nodes},
        pair_links=pairs or {},
    )


LAYOUTS = {
    "two alike + one other": [("a", [(X, 2)], FAST), ("b", [(X, 2)], FAST), ("c", [(Y, 1)], PCIE)],
    "mixed nodes": [("a", [(X, 1), (Y, 2)], PCIE), ("b", [(X, 1), (Y, 2)], PCIE)],
    "same devices, other links": [("a", [(X, 2)], FAST), ("b", [(X, 2)], PCIE)],
    "three alike": [("a", [(Y, 2)], PCIE), ("b", [(Y, 2)], PCIE), ("c", [(Y, 2)], PCIE)],
}


def canonical(sym: Symmetry, ids: Sequence[str]) -> Selection:
    """Brute force: the orbit of a concrete subset (per node, devices used of each class)."""
    used = set(ids)
    out = []
    for shape in sym.shapes:
        vectors = [
            tuple(sum(d in used for d in sym.classes[c].devices[i]) for c in shape.classes)
            for i in range(len(shape.nodes))
        ]
        out.append(tuple(sorted(vectors, reverse=True)))
    return tuple(out)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_orbits_are_the_identity_subsets_up_to_symmetry(layout: str) -> None:
    cluster = make(LAYOUTS[layout])
    sym = symmetry(cluster)
    ids = [d.id for d in cluster.devices]
    brute = {
        canonical(sym, combo)
        for k in range(len(ids) + 1)
        for combo in itertools.combinations(ids, k)
    }
    listed = list(orbits(sym))
    assert len(listed) == len(set(listed)) == orbit_count(sym)
    assert set(listed) == brute
    for sel in listed:  # placing an orbit gives a member of it
        assert canonical(sym, sym.devices(sel)) == sel
        assert sym.size(sel) == len(sym.devices(sel))


def test_shapes_by_hand() -> None:
    sym = symmetry(make(LAYOUTS["two alike + one other"]))
    assert [s.nodes for s in sym.shapes] == [("a", "b"), ("c",)]
    # identity-level: 3 * 3 * 3 per-node counts = 27 subsets; orbits: {a,b} as a multiset of
    # two counts in 0..2 (6) times c's 2 = 12.
    assert orbit_count(sym) == 12
    sym = symmetry(make(LAYOUTS["same devices, other links"]))
    assert len(sym.shapes) == 2  # different intra links: not interchangeable
    sym = symmetry(make(LAYOUTS["mixed nodes"]))
    assert len(sym.shapes) == 1 and [c.per_node for c in sym.classes] == [1, 2]


def test_a_pair_override_makes_its_nodes_unique() -> None:
    nodes = LAYOUTS["three alike"]
    sym = symmetry(make(nodes, pairs={("a.0", "b.0"): FAST}))
    assert sorted(s.nodes for s in sym.shapes) == [("a",), ("b",), ("c",)]


def test_node_levels_are_whole_nodes() -> None:
    sym = symmetry(make(LAYOUTS["three alike"]))
    levels = list(node_levels(sym))
    assert len(levels) == node_level_count(sym) == 4
    assert sorted(sym.size(s) for s in levels) == [0, 2, 4, 6]


@given(
    st.integers(1, 500),
    st.lists(st.tuples(st.floats(0.1, 10.0), st.integers(1, 6)), min_size=1, max_size=5),
)
def test_split_groups_equals_split_batch_on_contiguous_groups(
    batch: int, groups: list[tuple[float, int]]
) -> None:
    weights = [w for w, _ in groups]
    counts = [c for _, c in groups]
    if batch < sum(counts):
        with pytest.raises(ValueError):
            split_groups(batch, weights, counts)
        return
    flat = [w for w, c in groups for _ in range(c)]
    shares = expand(split_groups(batch, weights, counts), counts)
    assert [b for group in shares for b in group] == split_batch(batch, flat)


@pytest.mark.parametrize("name", ["big-64", "hetero-2node", "homogeneous-4gpu", "edge"])
def test_grouped_allreduce_equals_the_ring_construction(name: str) -> None:
    cluster = load_cluster(CLUSTERS / f"{name}.yaml")
    rng = random.Random(name)
    for _ in range(40):
        ids = [d.id for d in cluster.devices if rng.random() < 0.5]
        rng.shuffle(ids)  # any ring order
        if len(ids) < 2:
            continue
        for nbytes in (1e3, 1e6, 1e9):
            if len({cluster.device(d).node for d in ids}) > 1:
                want = allreduce_time(nbytes, ids, cluster, algorithm="hierarchical")
            else:
                want = min(
                    allreduce_time(nbytes, ids, cluster, algorithm=a) for a in ("ring", "tree")
                )
            per: dict[str, int] = {}
            for d in ids:
                per[cluster.device(d).node] = per.get(cluster.device(d).node, 0) + 1
            nodes = [
                (k, cluster.intra_links.get(n), cluster.network.get(n), 1) for n, k in per.items()
            ]
            got = grouped_allreduce_time(nbytes, nodes, cluster.collective_overhead_s)
            assert math.isclose(got, want, rel_tol=1e-12)
            assert math.isclose(allreduce_time(nbytes, ids, cluster), want, rel_tol=1e-12)


def syn_graph(n: int = 6) -> ModelGraph:
    layers = tuple(
        LayerInfo(
            name=f"l{i}",
            fwd_flops=1e9,
            bwd_flops=2e9,
            params=200_000,
            param_bytes=800_000,
            param_tensor_bytes=(800_000,),
            out_bytes=40_000,
            saved_bytes=40_000,
            fwd_io_bytes=0,
            bwd_io_bytes=0,
        )
        for i in range(n)
    )
    return ModelGraph(
        name="syn",
        input_shape=(1,),
        input_bytes=40_000,
        dtype="fp32",
        layers=layers,
        cut_bytes=(40_000,) * (n - 1),
    )


def context(cluster: Cluster, batch: int) -> Context:
    graph = syn_graph()
    pricing = Pricing(graph=graph, cluster=cluster, compute=AnalyticalCompute())
    return Context(model=ModelRef(name="syn"), graph=graph, pricing=pricing, batch=batch)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dp_from_counts_equals_dp_on_the_devices(layout: str) -> None:
    cluster = make(LAYOUTS[layout])
    ctx, sym = context(cluster, 48), symmetry(cluster)
    for sel in orbits(sym):
        if not sym.size(sel):
            continue
        by_counts = dp_of(ctx, sym, sel)
        concrete = dp_candidate(ctx, sym.devices(sel))
        assert by_counts is not None and concrete is not None
        assert by_counts.label == concrete.label
        for field in ("time_s", "energy_j", "power_w", "devices"):
            a, b = getattr(by_counts.estimate, field), getattr(concrete.estimate, field)
            assert math.isclose(a, b, rel_tol=1e-9), (field, a, b)
        assert by_counts.plan == concrete.plan


def test_dp_from_counts_on_a_generated_64_device_cluster() -> None:
    cluster = load_cluster(CLUSTERS / "big-64.yaml")
    ctx, sym = context(cluster, 512), symmetry(cluster)
    for sel in node_levels(sym):
        if sym.size(sel):
            a, b = dp_of(ctx, sym, sel), dp_candidate(ctx, sym.devices(sel))
            assert a is not None and b is not None
            assert math.isclose(a.estimate.time_s, b.estimate.time_s, rel_tol=1e-9)


TIME = Objective(weights={"time": 1.0})


@pytest.mark.parametrize("objective", ["time", "energy"])
def test_orbit_search_finds_the_identity_level_optimum(objective: str) -> None:
    """Symmetry reduction loses nothing: the best plan over the orbits is as good as the best
    over every identity-level subset (all 2^5 of them), with fewer simulations."""
    cluster = make(LAYOUTS["two alike + one other"])
    ctx = context(cluster, 24)
    opts = SearchOptions(batch=24, objective=Objective(weights={objective: 1.0}))
    args = (ctx.model, ctx.graph, cluster, AnalyticalCompute(), opts)
    by_orbit = exhaustive_search(*args, subsets="orbits")
    by_id = exhaustive_search(*args, subsets="identity")
    assert by_orbit.simulated < by_id.simulated
    assert math.isclose(by_orbit.best.score, by_id.best.score, rel_tol=1e-9)
    heuristic = search(*args)
    assert heuristic.best.score >= by_orbit.best.score * (1 - 1e-9)  # it searches a subset


def test_descent_finds_the_best_whole_node_subset_for_data_parallel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = load_cluster(CLUSTERS / "big-64.yaml")
    ctx = context(cluster, 512)
    opts = SearchOptions(batch=512, objective=TIME, families=("dp",))
    full = subset_space(ctx, cluster, opts, None)
    assert full.method == "nodes"
    monkeypatch.setattr(subsets_mod, "MAX_NODE_SUBSETS", 1)
    descent = subset_space(ctx, cluster, opts, None)
    assert descent.method == "descent"
    assert len(descent.selections) < len(full.selections)

    def best(space: subsets_mod.Space) -> float:
        return min(c.estimate.time_s for c in space.dp if c is not None)

    assert math.isclose(best(descent), best(full), rel_tol=1e-12)
