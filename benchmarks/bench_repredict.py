"""Re-predict the measured cases of a ``hetplan bench`` run with the current model.

Each case's own plan is predicted again (``hetplan.predict``) with the run's profile store, so
the measurements stay the same and only the model differs: the way to compare models on a
shared machine whose timings drift between runs (docs/benchmarks.md). Prints every case and
the median signed error (measured slower than predicted is +) by family and by cluster; the
planner's cases count under the family of the plan it picked.

With ``--picks`` it also searches again each model x cluster of the run (the suite's planner
families and batch) and prints the new pick beside the run's, with the run's measured time of
the plan the new pick equals, if any.

Run: ``.venv/bin/python benchmarks/bench_repredict.py out/bench27/results.json STORE
[--json OUT] [--picks] [--clusters DIR]`` (STORE: the ``HETPLAN_PROFILE_DIR`` the run used;
DIR: cluster files to price on; default the run's own measured copies, ``clusters/`` beside
its results, where it has them (``hetplan bench`` measures each cluster's links), else
``examples/clusters``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hetplan.bench.plans import plan_label, planner_pick
from hetplan.bench.runner import comparable_memory
from hetplan.bench.suite import cluster_path
from hetplan.cluster import Cluster, load_cluster
from hetplan.cost.types import ComputeModel
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import Prediction, predict
from hetplan.profile.select import compute_model
from hetplan.serde import from_data, to_data

ROOT = Path(__file__).resolve().parent.parent


CLUSTERS = [ROOT / "examples" / "clusters"]
"""Folder of the cluster files the cases are priced on (``--clusters``; default the examples,
as the suite ran them)."""


def family(case: dict[str, Any]) -> str:
    plan = case["plan"]
    if case["strategy"] != "planner":
        return str(case["strategy"])
    return "ps-async" if plan.get("ps_async") else str(plan["strategy"])


def predictions(results: Path, store: Path) -> Iterator[tuple[dict[str, Any], Prediction]]:
    """Each case of a bench run with its plan predicted again by the current model."""
    data = json.loads(results.read_text())
    graphs: dict[tuple[str, str | None], tuple[ModelGraph, ComputeModel]] = {}
    clusters: dict[str, Cluster] = {}
    for case in data["cases"]:
        plan = from_data(Plan, case["plan"], str(results))
        key = (plan.model.name, plan.model.dataset)
        if key not in graphs:
            graph = build_graph(ModelRef(name=key[0], dataset=key[1]))
            graphs[key] = (graph, compute_model(graph.dtype, directory=store))
        name = case["cluster"]
        if name not in clusters:
            clusters[name] = load_cluster(cluster_path(name, CLUSTERS[0]))
        graph, compute = graphs[key]
        yield case, predict(plan, graph, clusters[name], compute)


def repredicted_memory(results: Path, store: Path) -> dict[str, Any]:
    """The run's results with every rank's predicted peak memory from the current model."""
    cases = []
    for case, pred in predictions(results, store):
        now = comparable_memory(pred)
        memory = [{**r, "predicted_bytes": now.get(r["device"], 0.0)} for r in case["memory"]]
        cases.append({**case, "memory": memory})
    return {**json.loads(results.read_text()), "cases": cases}


def repredict(results: Path, store: Path) -> list[dict[str, Any]]:
    rows = []
    for case, pred in predictions(results, store):
        name = case["cluster"]
        now = comparable_memory(pred)
        rows.append(
            {
                "model": case["model"], "cluster": name, "strategy": case["strategy"],
                "family": family(case), "label": case["label"],
                "predicted_s": pred.iteration_time_s, "run_predicted_s": case["predicted_s"],
                "measured_s": case["measured_s"], "memory": _memory(case, now),
            }
        )  # fmt: skip
    return rows


def _memory(case: dict[str, Any], now: dict[str, float]) -> float | None:
    """The case's memory error re-predicted: its worst rank's (measured - predicted) /
    predicted peak, as the suite reports it; None where no rank has both."""
    errs = [
        r["measured_bytes"] / now[r["device"]] - 1.0
        for r in case.get("memory") or []
        if r.get("measured_bytes") and now.get(r["device"], 0.0) > 0
    ]
    return max(errs, key=abs) if errs else None


def _key(plan: dict[str, Any]) -> str:
    """What makes two plans the same (``bench.stats.plan_key``'s fields)."""
    fields = (
        "strategy", "micro_batches", "pipelines", "optimizer", "recompute", "recompute_mode",
        "tp", "sync", "staleness", "ps_devices", "ps_assignment", "ps_async",
    )  # fmt: skip
    full = to_data(from_data(Plan, plan, "plan"))  # fields newer than the run: defaults
    return json.dumps({k: full.get(k) for k in fields}, sort_keys=True, default=str)


def picks(results: Path, store: Path) -> None:
    """The planner's pick of every model x cluster of the run, again, against the run's."""
    data = json.loads(results.read_text())
    for case in data["cases"]:
        if case["strategy"] != "planner":
            continue
        plan = from_data(Plan, case["plan"], str(results))
        graph = build_graph(ModelRef(name=plan.model.name, dataset=plan.model.dataset))
        compute = compute_model(graph.dtype, directory=store)
        cluster = load_cluster(cluster_path(case["cluster"], CLUSTERS[0]))
        found = planner_pick(
            plan.model, graph, cluster, compute, plan.global_batch, run_check=False
        )
        best = found.ranking.ranked[0]
        new = to_data(best.candidate.plan)
        same = [
            c for c in data["cases"]
            if c["cluster"] == case["cluster"] and c["model"] == case["model"]
            and _key(c["plan"]) == _key(new)
        ]  # fmt: skip
        measured = f"{1e3 * same[0]['measured_s']:.1f} ms" if same else "not measured"
        print(
            f"{case['model'][:12]:12} {case['cluster']:16} run: {case['label']} "
            f"({1e3 * case['measured_s']:.1f} ms) -> now: {plan_label(best.candidate.plan)} "
            f"({1e3 * best.metrics.time_s:.1f} ms predicted; run measured {measured})"
        )


def error(row: dict[str, Any]) -> float:
    return float(row["measured_s"] / row["predicted_s"] - 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("store", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--picks", action="store_true")
    ap.add_argument("--clusters", type=Path, default=None, help="cluster files' folder")
    args = ap.parse_args()
    if args.clusters is not None:
        CLUSTERS[0] = args.clusters
    elif (args.results.parent / "clusters").is_dir():  # the links the run measured
        CLUSTERS[0] = args.results.parent / "clusters"
    rows = repredict(args.results, args.store)
    for r in rows:
        print(
            f"{r['model'][:12]:12} {r['cluster']:16} {r['label'][:36]:36} "
            f"run {1e3 * r['run_predicted_s']:7.1f} now {1e3 * r['predicted_s']:7.1f} "
            f"measured {1e3 * r['measured_s']:7.1f} ms  error {100 * error(r):+6.1f}%"
            + ("" if r["memory"] is None else f"  memory {100 * r['memory']:+6.1f}%")
        )
    groups: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        groups[f"family {r['family']}"].append(error(r))
        groups[f"cluster {r['cluster']}"].append(error(r))
    print(f"median |error| {100 * statistics.median(abs(error(r)) for r in rows):.1f}%")
    mem = [abs(r["memory"]) for r in rows if r["memory"] is not None]
    if mem:
        print(
            f"memory: {len(mem)} cases, median |error| {100 * statistics.median(mem):.1f}%, "
            f"max {100 * max(mem):.1f}%"
        )
    for name in sorted(groups):
        errs = groups[name]
        print(f"{name}: {len(errs)} cases, median {100 * statistics.median(errs):+.1f}%")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.picks:
        picks(args.results, args.store)


if __name__ == "__main__":
    main()
