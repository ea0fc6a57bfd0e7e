"""The printers of ``plan`` and ``predict`` on hand-made rankings: the grouped stage map, the
merged duplicate rows, the price column, the legend and the EDP basis."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from hetplan.cli.plan_view import (
    MAX_GROUPS,
    MAX_STAGES,
    index_ranges,
    print_ranking,
    stage_map_lines,
    table_groups,
)
from hetplan.cli.predict_view import print_prediction
from hetplan.cluster import load_cluster, resolve_config
from hetplan.cluster.generate import generate_config
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.plan.context import Candidate
from hetplan.plan.objective import Metrics, Objective
from hetplan.plan.search import Ranked, Ranking
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan, Strategy
from hetplan.predict import predict
from hetplan.units import fmt_joules, fmt_seconds

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
REF = ModelRef(name="resnet-tiny", dataset="cifar10")


@functools.cache
def _graph() -> ModelGraph:
    return build_graph(REF)


@functools.cache
def _cluster(name: str) -> Cluster:
    return load_cluster(CLUSTERS / f"{name}.yaml")


@functools.cache
def _generated(types: tuple[tuple[str, int], ...]) -> Cluster:
    return resolve_config(generate_config(list(types), per_node=8), "generated")


def _layers() -> list[str]:
    return [layer.name for layer in _graph().layers]


def _dp(ids: Sequence[str], batches: Sequence[int]) -> Plan:
    pipes = [
        PipelinePlan(stages=[StagePlan(layers=_layers(), devices=[d])], batch=b)
        for d, b in zip(ids, batches, strict=True)
    ]
    return Plan(model=REF, strategy="dp", global_batch=sum(batches), pipelines=pipes)


def _ranked(
    plan: Plan,
    cluster: Cluster,
    label: str,
    *,
    family: str = "dp",
    baseline: str | None = None,
    dataset_size: int | None = None,
) -> Ranked:
    pred = predict(plan, _graph(), cluster, AnalyticalCompute(), dataset_size=dataset_size)
    metrics = Metrics(
        time_s=pred.iteration_time_s,
        samples_per_s=pred.samples_per_s,
        power_w=pred.power_w,
        energy_j=pred.energy_j_per_iteration,
        dollars=pred.dollars_per_iteration,
        devices=len(plan.devices),
    )
    cand = Candidate(
        family=family, label=label, build=lambda: plan, estimate=metrics, baseline=baseline
    )
    return Ranked(candidate=cand, prediction=pred, metrics=metrics, score=metrics.time_s)


def _ranking(ranked: list[Ranked], baselines: dict[str, Ranked] | None = None) -> Ranking:
    ranked = sorted(ranked, key=lambda r: r.score)
    return Ranking(
        objective=Objective(weights={"time": 1.0}),
        ranked=ranked,
        baselines=baselines or {},
        pareto=ranked[:1],
    )


def _printed(
    ranking: Ranking, capsys: pytest.CaptureFixture[str], *, wide: bool = False
) -> list[str]:
    capsys.readouterr()
    print_ranking(ranking, 10, 0.5, wide=wide)
    return capsys.readouterr().out.splitlines()


def _map_lines(lines: list[str]) -> list[str]:
    """The winner line and the indented stage-map lines after it."""
    start = next(i for i, x in enumerate(lines) if x.startswith("winner: "))
    out = [lines[start]]
    for x in lines[start + 1 :]:
        if not x.startswith("  "):
            break
        out.append(x)
    return out


def _header(lines: list[str]) -> str:
    return next(x for x in lines if "iteration" in x and "plan" in x)


# ------------------------------------------------------------------------- the stage map


def test_index_ranges() -> None:
    assert index_ranges([0]) == "0"
    assert index_ranges([3, 0, 1, 2, 7, 9, 10, 11, 12]) == "0-3, 7, 9-12"
    # Past 4 ranges (+1 that would show as well), the rest is counted: 8 + 10 + 12 + 14.
    assert index_ranges(list(range(0, 15, 2))) == "0, 2, 4, 6 ... (+4 more)"
    assert index_ranges(list(range(1000))) == "0-999"


def test_a_thousand_replicas_print_as_one_group(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _generated((("A100-80GB", 125),))
    ids = [d.id for d in cluster.devices]
    assert len(ids) == 1000
    best = _ranked(_dp(ids, [2] * 1000), cluster, "dp x1000")
    lines = _map_lines(_printed(_ranking([best]), capsys))
    assert len(lines) <= 20
    assert "1 GB = 10^9 bytes" in lines[0]
    (group,) = lines[1:]
    assert group.startswith("  pipelines 0-999 (1000 x, batch 2 each): ")
    assert f"(5 layers) on A100-80GB {ids[0]}, {ids[1]}, {ids[2]} ... (+997 more): " in group
    assert group.endswith(" of 85.90 GB]")  # 80 GiB, in decimal GB
    assert "GiB" not in "\n".join(lines)


def test_distinct_pipelines_are_capped(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _generated((("A100-80GB", 5),))
    ids = [d.id for d in cluster.devices]
    batches = list(range(1, 41))  # 40 replicas, no two alike
    best = _ranked(_dp(ids, batches), cluster, "dp x40")
    lines = stage_map_lines(best)
    assert len(lines) == MAX_GROUPS + 1 <= 20
    assert lines[0].startswith("  pipeline 0 (batch 1): [stem..head (5 layers) on A100-80GB ")
    assert lines[-1] == (
        f"  ... {40 - MAX_GROUPS} more groups of {40 - MAX_GROUPS} pipelines "
        "(the plan file lists every pipeline)"
    )
    assert len(_map_lines(_printed(_ranking([best]), capsys))) <= 20


def test_hybrid_groups_by_stage_device_types() -> None:
    cluster = _generated((("A100-80GB", 1), ("T4", 1)))
    a100 = [d.id for d in cluster.devices if d.type.name == "A100-80GB"]
    t4 = [d.id for d in cluster.devices if d.type.name == "T4"]
    names = _layers()
    pipes = [
        PipelinePlan(
            stages=[
                StagePlan(layers=names[:2], devices=[a]),
                StagePlan(layers=names[2:], devices=[t]),
            ],
            batch=4,
        )
        for a, t in zip(a100, t4, strict=True)
    ]
    plan = Plan(model=REF, strategy="hybrid", global_batch=32, pipelines=pipes, micro_batches=2)
    lines = stage_map_lines(_ranked(plan, cluster, "hybrid 8 x 2 stages", family="hybrid"))
    (line,) = lines
    assert line.startswith("  pipelines 0-7 (8 x, batch 4 each): [stem..layer1_0 (2 layers) on ")
    assert f"on A100-80GB {a100[0]}, " in line and f"on T4 {t4[0]}, " in line
    assert "(+5 more)" in line and " -> " in line
    assert "(3 layers)" in line


def test_one_layer_is_singular() -> None:
    cluster = _cluster("hetero-2node")
    names = _layers()
    stages = [
        StagePlan(layers=names[:4], devices=["v100.0"]),
        StagePlan(layers=names[4:], devices=["v100.1"]),
    ]
    plan = Plan(
        model=REF,
        strategy="gpipe",
        global_batch=8,
        pipelines=[PipelinePlan(stages=stages, batch=8)],
        micro_batches=2,
    )
    (line,) = stage_map_lines(_ranked(plan, cluster, "gpipe", family="gpipe"))
    assert "[head (1 layer) on V100-32GB v100.1: " in line
    assert "[stem..pool (4 layers) on V100-32GB v100.0: " in line
    assert line.startswith("  pipeline 0 (batch 8): ")


# ------------------------------------------------------------------------ the ranked table


def test_identical_plans_share_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster("hetero-2node")
    plan = _dp(["v100.0", "v100.1"], [4, 4])
    searched = _ranked(plan, cluster, "dp x2 batch by speed")
    base = _ranked(_dp(["v100.0", "v100.1"], [4, 4]), cluster, "dp x2 equal", baseline="dp-equal")
    other = _ranked(_dp(["v100.0", "t4.0"], [4, 4]), cluster, "dp x2 mixed", baseline="dp-mixed")
    ranking = _ranking([searched], {"dp-equal": base, "dp-mixed": other})
    rows = table_groups(ranking, 10)
    assert [r.ranked for r in rows] == [searched, other]
    assert rows[0].label == "dp x2 batch by speed (also: dp-equal baseline)"
    assert rows[1].label == "dp x2 mixed (dp-mixed baseline)"
    text = "\n".join(_printed(ranking, capsys))
    assert "dp x2 equal" not in text  # merged away
    assert "also:" in text


def test_single_stage_pipelines_of_every_schedule_share_one_row() -> None:
    cluster = _cluster("local-cpu")
    device = cluster.devices[0].id
    ranked = []
    for strategy in ("1f1b", "gpipe", "pipedream"):
        s: Strategy = strategy  # type: ignore[assignment]
        stages = [StagePlan(layers=_layers(), devices=[device])]
        plan = Plan(
            model=REF,
            strategy=s,
            global_batch=8,
            pipelines=[PipelinePlan(stages=stages, batch=8)],
            micro_batches=2,
        )
        ranked.append(_ranked(plan, cluster, f"{strategy} 1 stage", family=strategy))
    rows = table_groups(_ranking(ranked), 10)
    assert len(rows) == 1
    first = rows[0].ranked.candidate.family
    others = sorted({"1f1b", "gpipe", "pipedream"} - {first})
    assert rows[0].label.endswith(f"(also: {', '.join(others)})")


def test_price_column_only_with_prices(capsys: pytest.CaptureFixture[str]) -> None:
    edge = _cluster("edge")
    ids = [d.id for d in edge.devices][:2]
    unpriced = _ranking([_ranked(_dp(ids, [4, 4]), edge, "dp x2")])
    lines = _printed(unpriced, capsys)
    assert "$" not in _header(lines)
    assert "$/" not in "\n".join(lines)

    hetero = _cluster("hetero-2node")
    per_it = _ranking([_ranked(_dp(["v100.0", "t4.0"], [4, 4]), hetero, "dp x2")])
    lines = _printed(per_it, capsys)
    assert "$" not in _header(lines)  # the default table leaves the price to --wide
    assert not any("$/it: rental cost" in x for x in lines)
    assert any("--wide adds" in x for x in lines) and "$/it" in " ".join(lines)
    lines = _printed(per_it, capsys, wide=True)
    assert "$/it" in _header(lines) and "$/epoch" not in _header(lines)
    assert any("$/it: rental cost" in x for x in lines)

    priced = _ranked(_dp(["v100.0", "t4.0"], [4, 4]), hetero, "dp x2", dataset_size=800)
    free = _ranked(_dp(ids, [4, 4]), edge, "dp edge", baseline="b", dataset_size=800)
    mixed = _ranking([priced], {"b": free})
    lines = _printed(mixed, capsys, wide=True)
    assert "$/epoch" in _header(lines)
    row = next(x for x in lines if "dp edge" in x)
    assert row.rstrip("│ ").endswith("-")  # no price: a dash


def test_table_columns_are_explained(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster("hetero-2node")
    best = _ranked(_dp(["v100.0"], [8]), cluster, "dp x1")
    lines = _printed(_ranking([best]), capsys, wide=True)
    header = _header(lines)
    assert "headroom" not in header
    for col in ("staleness", "mem free", "power W", "energy/it", "EDP J*s/it"):
        assert col in header
    legend = " ".join(lines)
    assert "--wide adds" not in legend
    assert "mem free: smallest fraction of memory left free on any device" in legend
    assert "power W: mean power of the plan's devices over the iteration" in legend
    assert "EDP J*s/it: energy-delay product per iteration" in legend
    front = next(x for x in lines if x.startswith("time-energy Pareto front"))
    energy = fmt_joules(best.metrics.energy_j)  # 3 significant digits, J/kJ/mJ...
    time = fmt_seconds(best.metrics.time_s)
    assert time.endswith(" us")  # hundreds of microseconds: a V100 step of 8 samples
    assert front.endswith(f"(iteration / energy per iteration): {time} / {energy}")


def test_the_default_table_tags_an_asynchronous_plan(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster("local-cpu")
    ids = [d.id for d in cluster.devices]
    names = _layers()
    half = len(names) // 2
    stages = [
        StagePlan(layers=names[:half], devices=ids[:1]),
        StagePlan(layers=names[half:], devices=ids[1:2]),
    ]
    plan = Plan(model=REF, strategy="pipedream", global_batch=8,
                pipelines=[PipelinePlan(stages=stages, batch=8)], micro_batches=2)  # fmt: skip
    ranking = _ranking([_ranked(plan, cluster, "pipedream 2 stages", family="pipedream")])
    lines = _printed(ranking, capsys)
    assert "staleness" not in _header(lines)
    row = next(x for x in lines if "pipedream 2 stages" in x)
    assert "(async ≤1 it)" in row  # the staleness, in the plan cell
    assert "async ≤N it, WSP D=N: how far the weights" in " ".join(lines)
    lines = _printed(ranking, capsys, wide=True)
    assert "staleness" in _header(lines)
    assert "(async" not in next(x for x in lines if "pipedream 2 stages" in x)


# ------------------------------------------------------------------------------- predict


def test_predict_states_the_edp_basis(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster("hetero-2node")
    plan = _dp(["v100.0", "t4.0"], [4, 4])
    pred = predict(plan, _graph(), cluster, AnalyticalCompute(), dataset_size=800)
    assert pred.edp_basis == "epoch"
    capsys.readouterr()
    print_prediction(pred)
    out = capsys.readouterr().out
    per_it = pred.energy_j_per_iteration * pred.iteration_time_s
    assert f"EDP {per_it:.4g} J*s per iteration ({pred.edp:.4g} J*s per epoch)" in out
    assert "epoch of 100 iterations: " in out
    assert "1 GB = 10^9 bytes" in out and "GiB" not in out

    pred = predict(plan, _graph(), cluster, AnalyticalCompute())
    print_prediction(pred)
    out = capsys.readouterr().out
    assert pred.edp_basis == "iteration"
    assert f"EDP {pred.edp:.4g} J*s per iteration" in out and "per epoch" not in out
    assert "/iteration" in out and "$" in out


def test_long_pipelines_show_their_ends() -> None:
    ref = ModelRef(name="vgg11", dataset="cifar10")
    graph = build_graph(ref)
    names = [layer.name for layer in graph.layers]
    cluster = _generated((("A100-80GB", 2),))
    ids = [d.id for d in cluster.devices]
    n = MAX_STAGES + 1
    cuts = [len(names) * k // n for k in range(n + 1)]
    stages = [
        StagePlan(layers=names[a:b], devices=[ids[k]])
        for k, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
    plan = Plan(
        model=ref,
        strategy="gpipe",
        global_batch=8,
        pipelines=[PipelinePlan(stages=stages, batch=8)],
        micro_batches=2,
    )
    pred = predict(plan, graph, cluster, AnalyticalCompute())
    metrics = Metrics(
        time_s=pred.iteration_time_s,
        samples_per_s=pred.samples_per_s,
        power_w=pred.power_w,
        energy_j=pred.energy_j_per_iteration,
        dollars=pred.dollars_per_iteration,
        devices=n,
    )
    cand = Candidate(family="gpipe", label="gpipe", build=lambda: plan, estimate=metrics)
    (line,) = stage_map_lines(Ranked(candidate=cand, prediction=pred, metrics=metrics, score=1.0))
    assert line.count(" -> ") == MAX_STAGES  # MAX_STAGES - 2 stages, the gap, the last 2
    assert " -> ... (1 more stage) ... -> " in line
    assert f" {ids[0]}: " in line and f" {ids[n - 1]}: " in line
    assert f" {ids[MAX_STAGES - 2]}: " not in line
