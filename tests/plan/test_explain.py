"""Plain-language reasons: each sentence checked against the numbers of the ranking."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from pathlib import Path

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.plan.explain import reasons
from hetplan.plan.objective import Limits, Objective, parse_objective
from hetplan.plan.search import Ranking, SearchOptions, search
from hetplan.planspec import ModelRef

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"


@functools.cache
def _cluster(name: str) -> Cluster:
    return load_cluster(CLUSTERS / f"{name}.yaml")


@functools.cache
def ranked(model: str, cluster: str, objective: str = "time", batch: int = 64) -> Ranking:
    ref = ModelRef(name=model, dataset="cifar10")
    opts = SearchOptions(batch=batch, objective=parse_objective(objective))
    return search(ref, build_graph(ref), _cluster(cluster), AnalyticalCompute(), opts)


def test_no_ranked_plan_no_reasons() -> None:
    empty = Ranking(objective=Objective(weights={"time": 1.0}), ranked=[], baselines={})
    assert reasons(empty, _cluster("edge")) == []


def test_search_fills_the_reasons() -> None:
    ranking = ranked("vgg11", "hetero-2node")
    assert ranking.reasons == reasons(ranking, _cluster("hetero-2node"))
    assert ranking.reasons


def test_versus_baselines_carries_the_speed_ratios() -> None:
    ranking = ranked("vgg11", "hetero-2node")
    best = ranking.best
    dp = ranking.baselines["dp-equal"].metrics.time_s / best.metrics.time_s
    eq = ranking.baselines["equal-pipeline"].metrics.time_s / best.metrics.time_s
    assert dp > 1 and eq > 1
    expected = (
        f"{best.candidate.label}: {dp:.2f}x the speed of data parallel (equal batch split) "
        f"and {eq:.2f}x the speed of equal-layer GPipe"
    )
    assert ranking.reasons[0] == expected


def test_dp_wait_names_the_slow_type_and_the_idle_share() -> None:
    ranking = ranked("vgg11", "hetero-2node")
    cluster = _cluster("hetero-2node")
    dp = ranking.baselines["dp-equal"].prediction
    busy: dict[str, list[float]] = {}
    for dev in dp.devices:
        busy.setdefault(cluster.device(dev.id).type.name, []).append(dev.busy_fraction)
    mean = {t: sum(v) / len(v) for t, v in busy.items()}
    assert mean["T4"] > mean["V100-32GB"]  # an equal split waits on the slower T4s
    idle = 1.0 - mean["V100-32GB"]
    line = (
        "data parallel with an equal batch split waits on the T4s: "
        f"the V100-32GBs idle {idle:.0%} of each step"
    )
    assert line in ranking.reasons


def test_left_out_devices_with_the_alternative_numbers() -> None:
    ranking = ranked("vgg11", "hetero-2node")
    cluster = _cluster("hetero-2node")
    used = set(ranking.best.candidate.plan.devices)
    unused = [d for d in cluster.devices if d.id not in used]
    assert unused  # the winner does not use the T4s
    ids = {d.id for d in unused}
    bigger = [r for r in ranking.ranked if used < set(r.candidate.plan.devices)]
    full = [r for r in bigger if ids <= set(r.candidate.plan.devices)]
    alt = min(full or bigger, key=lambda r: r.score)
    added = set(alt.candidate.plan.devices) - used

    def describe(devs: set[str]) -> str:
        counts = Counter(d.type.name for d in cluster.devices if d.id in devs)
        return ", ".join(f"{t} x{n}" if n > 1 else t for t, n in sorted(counts.items()))

    gain = alt.metrics.samples_per_s / ranking.best.metrics.samples_per_s - 1.0
    energy = alt.metrics.energy_j / ranking.best.metrics.energy_j - 1.0
    line = (
        f"{describe(ids)} left out: adding {describe(added)} "
        f"({alt.candidate.label}) changes throughput by {gain:+.0%} "
        f"and energy per step by {energy:+.0%}"
    )
    assert line in ranking.reasons


def test_homogeneous_cluster_has_no_wait_or_left_out_reason() -> None:
    ranking = ranked("vgg11", "homogeneous-4gpu")
    assert len(ranking.best.candidate.plan.devices) == 4
    assert not any("waits on" in r for r in ranking.reasons)
    assert not any("left out" in r for r in ranking.reasons)
    assert not any(r.startswith("rejected") for r in ranking.reasons)


def test_rejected_counts_are_summarised_most_common_first() -> None:
    ranking = ranked("vgg11", "homogeneous-4gpu")
    noisy = dataclasses.replace(ranking, rejected=Counter({"limit: power": 2, "out of memory": 3}))
    lines = reasons(noisy, _cluster("homogeneous-4gpu"))
    assert lines[-1] == "rejected 5 candidates: out of memory (3), limit: power (2)"


def test_best_is_a_baseline_says_so_plainly() -> None:
    ranking = ranked("vgg11", "homogeneous-4gpu")
    base = ranking.baselines["dp-equal"]
    alone = dataclasses.replace(ranking, ranked=[base], baselines={"dp-equal": base})
    assert reasons(alone, _cluster("homogeneous-4gpu"))[0] == (
        f"{base.candidate.label} is the best plan"
    )


def test_left_out_alternative_uses_the_devices_it_names() -> None:
    # a one-device winner and a two-device plan that adds only one of the two left out
    ranking = ranked("resnet-tiny", "edge", batch=32)
    cluster = _cluster("edge")
    one = next(r for r in ranking.ranked if len(r.candidate.plan.devices) == 1)
    two = next(
        r
        for r in ranking.ranked
        if len(r.candidate.plan.devices) == 2
        and set(one.candidate.plan.devices) < set(r.candidate.plan.devices)
    )
    lines = reasons(dataclasses.replace(ranking, ranked=[one, two]), cluster)
    line = next(r for r in lines if "left out" in r)
    added = set(two.candidate.plan.devices) - set(one.candidate.plan.devices)
    (added_type,) = {cluster.device(d).type.name for d in added}
    # the sentence names exactly the device the alternative adds, not all left-out ones
    assert f"left out: adding {added_type} ({two.candidate.label})" in line, line


def test_left_out_names_the_limit_that_kept_devices_out() -> None:
    # a one-device winner with nothing bigger ranked: the device limit it reaches, else the
    # limits that rejected candidates, else no feasible plan
    ranking = ranked("resnet-tiny", "edge", batch=32)
    cluster = _cluster("edge")
    one = next(r for r in ranking.ranked if len(r.candidate.plan.devices) == 1)
    alone = dataclasses.replace(ranking, ranked=[one], rejected=Counter())
    others = [d for d in cluster.devices if d.id not in one.candidate.plan.devices]
    assert any("no feasible plan using them" in r for r in reasons(alone, cluster))
    capped = dataclasses.replace(alone, limits=Limits(max_devices=1))
    line = next(r for r in reasons(capped, cluster) if "left out" in r)
    assert line.endswith(" left out: --max-devices 1") and len(others) >= 1
    power = dataclasses.replace(alone, rejected=Counter({"limit: power": 3}))
    line = next(r for r in reasons(power, cluster) if "left out" in r)
    assert line.endswith("left out: no plan using them was found within the limits (limit: power)")
