"""The planner's heuristic against the exhaustive reference: optimality gap and sensitivity.

Run: .venv/bin/python benchmarks/bench_exactness.py [--quick] [--synchronous]
[--no-sensitivity] [--json PATH]

For every case (zoo model x cluster x objective) the heuristic (`hetplan.plan.search.search`)
is compared with `hetplan.plan.exhaustive.exhaustive_search`, which simulates every candidate of
the same space (every subset orbit, every micro-batch count):
gap = heuristic best score / exhaustive best score - 1 (objective time: the predicted
iteration-time excess). Rows mark the subset regime; every cluster here is in the exact one.
Both search every family ``SearchOptions`` defaults to, PipeDream included; ``--synchronous``
searches those ``hetplan plan`` does by default (no asynchronous family).
Then:

- regimes: the heuristic forced onto whole-node subsets (MAX_EXHAUSTIVE_SUBSETS = 1, rows
  "nodes") and onto coordinate descent (also MAX_NODE_SUBSETS = 1, rows "descent"), against
  the same every-orbit reference, with whether that optimum's subset is in the forced space;
- diagnosis of every gap over 2%: where the exhaustive best left the heuristic's funnel
  (subset never screened for its family, screened but not shortlisted, ...), its rank by the
  balanced bound that picks the pipelined/TP subsets, and its screening estimate against its
  simulated score;
- sensitivity: each shortlist constant that acts in the exact regime varied alone, only the
  heuristic rerun over the grid. Every cluster here is in the exact regime, where every family
  is screened on every subset (issue 27): PS_SUBSETS, PIPELINED_SUBSETS, TP_SUBSETS and
  REFINED_PER_FAMILY act only outside it, so they are inert on this grid and not varied.

search.py, screen.py and subsets.py read the constants as module globals at call time and no
other module binds them, so setting the attribute changes the run; `patched` sets every loaded
hetplan module that binds the name anyway, in case one starts importing it by value.

The exhaustive runs of the two objectives of one (model, cluster) share predictions (cached by
the plan's JSON; the simulator is deterministic): the second one's seconds are marked "*".
Single process, analytical compute model, each graph built once. Measured on 2 shared cores:
full run 20 min (the exhaustive references about 7, the 13 sensitivity rows at ~40 s of
heuristic CPU each most of the rest), --quick about 2 min.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.plan import screen as screen_mod
from hetplan.plan import search as search_mod
from hetplan.plan import subsets as subsets_mod
from hetplan.plan.candidates import refine
from hetplan.plan.classes import Selection, node_level_count, orbit_count, symmetry
from hetplan.plan.context import Candidate, Context
from hetplan.plan.exhaustive import exhaustive_search
from hetplan.plan.objective import Objective, parse_objective
from hetplan.plan.options import FAMILIES
from hetplan.plan.search import Ranked, Ranking, SearchOptions, make_context, search
from hetplan.plan.staleness import ASYNCHRONOUS_FAMILIES
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import Prediction
from hetplan.serde import to_data

CLUSTERS = Path(__file__).resolve().parent.parent / "examples" / "clusters"
EXAMPLES = ("edge.yaml", "hetero-2node.yaml", "homogeneous-4gpu.yaml")
GENERATED = {
    # 3 types x 2 nodes x 2 GPUs: 216 orbits, just inside the exact regime (256).
    "gen-3type.yaml": """
name: gen-3type
nodes:
  - {name: a100-0, devices: [{type: A100-40GB, count: 2}], link: {type: NVLink3}}
  - {name: a100-1, devices: [{type: A100-40GB, count: 2}], link: {type: NVLink3}}
  - {name: v100-0, devices: [{type: V100-16GB, count: 2}], link: {type: NVLink2}}
  - {name: v100-1, devices: [{type: V100-16GB, count: 2}], link: {type: NVLink2}}
  - {name: t4-0, devices: [{type: T4, count: 2}], link: {type: PCIe3x16}}
  - {name: t4-1, devices: [{type: T4, count: 2}], link: {type: PCIe3x16}}
network: {type: 10GbE}
""",
    # 2 types x 2 nodes x 4 GPUs: 225 orbits.
    "gen-2type.yaml": """
name: gen-2type
nodes:
  - {name: rtx3090-0, devices: [{type: RTX3090, count: 4}], link: {type: PCIe4x16}}
  - {name: rtx3090-1, devices: [{type: RTX3090, count: 4}], link: {type: PCIe4x16}}
  - {name: t4-0, devices: [{type: T4, count: 4}], link: {type: PCIe3x16}}
  - {name: t4-1, devices: [{type: T4, count: 4}], link: {type: PCIe3x16}}
network: {type: 25GbE}
""",
    # Two types inside each node, slow network: 45 orbits.
    "gen-mixed.yaml": """
name: gen-mixed
nodes:
  - {name: m0, devices: [{type: A10G, count: 2}, {type: L4, count: 2}], link: {type: PCIe4x16}}
  - {name: m1, devices: [{type: A10G, count: 2}, {type: L4, count: 2}], link: {type: PCIe4x16}}
network: {type: 1GbE}
""",
}
MODELS = [
    # (zoo name, dataset, global batch)
    ("resnet-tiny", "cifar10", 256),
    ("gpt-tiny", None, 128),  # tensor-parallel units: TP candidates appear
    ("mobilenetv2", "cifar10", 128),
    ("vgg11", "cifar10", 128),
    ("resnet18", "cifar10", 128),
]
OBJECTIVES = ("time", "energy")
QUICK_MODELS = ("resnet-tiny", "gpt-tiny")
QUICK_CLUSTERS = ("edge.yaml", "hetero-2node.yaml", "gen-3type.yaml")
GAP_LIMIT = 0.02
REGIMES: dict[str, dict[str, int]] = {
    "nodes": {"MAX_EXHAUSTIVE_SUBSETS": 1},
    "descent": {"MAX_EXHAUSTIVE_SUBSETS": 1, "MAX_NODE_SUBSETS": 1},
}
SENSITIVITY: dict[str, tuple[float, ...]] = {
    "CLOSE_FAMILY_RATIO": (1.0, 1.2, 1.5, 2.0, 3.0),
    "EXACT_REFINED_PER_FAMILY": (4, 8, 16, 32),
    "SIMULATED_PER_FAMILY": (1, 2, 3, 5),
}


@dataclass(frozen=True, kw_only=True)
class Case:
    model: str
    cluster_name: str
    objective: str
    ref: ModelRef
    graph: ModelGraph
    cluster: Cluster
    opts: SearchOptions

    @property
    def key(self) -> str:
        return f"{self.model} | {self.cluster_name} | {self.objective}"


@dataclass(frozen=True, kw_only=True)
class Reference:
    best: Ranked
    seconds: float
    simulated: int
    cached: bool
    """Predictions reused from the other objective's run."""


@dataclass(frozen=True, kw_only=True)
class Row:
    model: str
    cluster: str
    objective: str
    regime: str
    heuristic_best: str
    exhaustive_best: str
    gap: float
    heuristic_time_s: float
    exhaustive_time_s: float
    heuristic_s: float
    heuristic_cpu_s: float
    """This process's CPU seconds: steadier than wall time when other jobs share the cores."""
    exhaustive_s: float
    exhaustive_cached: bool
    heuristic_screened: int
    heuristic_simulated: int
    exhaustive_simulated: int
    reference_in_space: bool | None = None
    """Forced regimes: whether the exhaustive best's subset is in the regime's subset space."""


def family(cand: Candidate) -> str:
    """The family, with the tensor-parallel degree when there is one."""
    tp = cand.plan.tp
    return cand.family + (f"/tp{tp}" if tp > 1 else "")


def describe(r: Ranked) -> str:
    return f"{family(r.candidate)}: {r.candidate.label} on {len(r.candidate.plan.devices)}"


def plan_key(plan: Plan) -> str:
    return json.dumps(to_data(plan), sort_keys=True)


@contextmanager
def patched(changes: Mapping[str, float]) -> Iterator[None]:
    """Set each named constant in every loaded hetplan module that binds it; restore after."""
    saved: list[tuple[Any, str, object]] = []
    try:
        for name, value in changes.items():
            owners = [
                m
                for k, m in list(sys.modules.items())
                if k.startswith("hetplan") and m is not None and name in vars(m)
            ]
            if not owners:
                raise RuntimeError(f"no hetplan module defines {name}")
            for m in owners:
                saved.append((m, name, getattr(m, name)))
                setattr(m, name, value)
        yield
    finally:
        for m, name, value in reversed(saved):
            setattr(m, name, value)


@contextmanager
def shared_predictions(cache: dict[str, Prediction]) -> Iterator[None]:
    """Reuse predictions by plan across exhaustive runs (only the reference uses this, so the
    heuristic's seconds are never flattered). ``simulate`` looks ``predict`` up in search."""
    namespace = vars(search_mod)  # not re-exported by search: patch its globals directly
    real: Callable[..., Prediction] = namespace["predict"]

    def cached(plan: Plan, *args: Any, **kw: Any) -> Prediction:
        key = plan_key(plan)
        if key not in cache:
            cache[key] = real(plan, *args, **kw)
        return cache[key]

    namespace["predict"] = cached
    try:
        yield
    finally:
        namespace["predict"] = real


def timed(fn: Callable[[], Ranking]) -> tuple[Ranking, float, float]:
    """The result, wall seconds and CPU seconds of ``fn``."""
    t, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - cpu


def heuristic(case: Case) -> tuple[Ranking, float, float]:
    return timed(lambda: search(case.ref, case.graph, case.cluster, AnalyticalCompute(), case.opts))


def context(case: Case) -> Context:
    """The context ``search`` builds for ``case``."""
    return make_context(case.ref, case.graph, case.cluster, AnalyticalCompute(), case.opts)


def in_space(case: Case, best: Ranked) -> bool:
    """Whether ``best``'s device subset is one the current (maybe patched) regime screens."""
    space = subsets_mod.subset_space(context(case), case.cluster, case.opts, None)
    target = frozenset(best.candidate.plan.devices)
    return any(frozenset(space.devices(s)) == target for s in space.selections)


def regime_of(cluster: Cluster) -> str:
    """The subset regime ``subset_space`` picks under the current (maybe patched) limits."""
    sym = symmetry(cluster)
    if orbit_count(sym) <= subsets_mod.MAX_EXHAUSTIVE_SUBSETS:
        return "exact"
    return "nodes" if node_level_count(sym) <= subsets_mod.MAX_NODE_SUBSETS else "descent"


def load_clusters(quick: bool, tmp: Path) -> dict[str, Cluster]:
    out = {}
    for name in EXAMPLES:
        out[name] = load_cluster(CLUSTERS / name)
    for name, text in GENERATED.items():
        path = tmp / name
        path.write_text(text.lstrip())
        out[name] = load_cluster(path)
    return {k: v for k, v in out.items() if not quick or k in QUICK_CLUSTERS}


def make_cases(
    quick: bool, clusters: Mapping[str, Cluster], families: tuple[str, ...] = FAMILIES
) -> list[Case]:
    cases = []
    for name, dataset, batch in MODELS:
        if quick and name not in QUICK_MODELS:
            continue
        ref = ModelRef(name=name, dataset=dataset)
        graph = build_graph(ref)
        for cname, cluster in clusters.items():
            for obj in OBJECTIVES:
                opts = SearchOptions(batch=batch, objective=parse_objective(obj), families=families)
                cases.append(
                    Case(
                        model=name,
                        cluster_name=cname.removesuffix(".yaml"),
                        objective=obj,
                        ref=ref,
                        graph=graph,
                        cluster=cluster,
                        opts=opts,
                    )
                )
    return cases


def references(cases: Sequence[Case]) -> dict[str, Reference]:
    """The exhaustive optimum of every case; a case that crashes is skipped with the reason."""
    out: dict[str, Reference] = {}
    cache: dict[str, Prediction] = {}
    pair: tuple[str, str] | None = None
    for case in cases:
        if pair != (case.model, case.cluster_name):
            cache.clear()
            pair = (case.model, case.cluster_name)
        cached = bool(cache)
        try:
            with shared_predictions(cache):
                ranking, seconds, _ = timed(
                    lambda c=case: exhaustive_search(  # type: ignore[misc]
                        c.ref, c.graph, c.cluster, AnalyticalCompute(), c.opts
                    )
                )
            best = ranking.best
        except Exception:  # report and go on: one broken case must not hide the rest
            print(f"SKIP {case.key}: exhaustive search failed\n{traceback.format_exc()}")
            continue
        out[case.key] = Reference(
            best=best, seconds=seconds, simulated=ranking.simulated, cached=cached
        )
        print(f"  reference {case.key}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return out


def compare(
    cases: Sequence[Case], refs: Mapping[str, Reference], regime: str | None = None
) -> list[tuple[Case, Row, Ranked]]:
    """Run the heuristic on every case with a reference; ``regime`` labels patched runs."""
    out = []
    for case in cases:
        ref = refs.get(case.key)
        if ref is None:
            continue
        try:
            ranking, seconds, cpu = heuristic(case)
            best = ranking.best
        except Exception:
            print(f"SKIP {case.key} ({regime}): heuristic failed\n{traceback.format_exc()}")
            continue
        row = Row(
            model=case.model,
            cluster=case.cluster_name,
            objective=case.objective,
            regime=regime or regime_of(case.cluster),
            heuristic_best=describe(best),
            exhaustive_best=describe(ref.best),
            gap=best.score / ref.best.score - 1,
            heuristic_time_s=best.metrics.time_s,
            exhaustive_time_s=ref.best.metrics.time_s,
            heuristic_s=seconds,
            heuristic_cpu_s=cpu,
            exhaustive_s=ref.seconds,
            exhaustive_cached=ref.cached,
            heuristic_screened=ranking.screened,
            heuristic_simulated=ranking.simulated,
            exhaustive_simulated=ref.simulated,
            reference_in_space=None if regime is None else in_space(case, ref.best),
        )
        out.append((case, row, best))
    return out


def _bound_rank(
    ctx: Context, case: Case, target: set[str], keep: Callable[[int], bool]
) -> tuple[int, int] | None:
    """Rank (1-based) and count of the target's subset among those the balanced bound orders
    (``screen.by_bound``, sizes passing ``keep``)."""
    space = subsets_mod.subset_space(ctx, case.cluster, case.opts, None)
    sels: list[Selection] = [s for s in space.selections if keep(space.sym.size(s))]
    match = [s for s in sels if set(space.devices(s)) == target]
    if not match or len(sels) < 2:
        return None
    order = screen_mod.by_bound(ctx, space, sels, case.opts.objective)
    return order.index(match[0]) + 1, len(sels)


def _funnel(ctx: Context, case: Case, target: Candidate) -> str:
    """Where ``target`` (the exhaustive best) left the heuristic's funnel, mirroring search."""
    obj: Objective = case.opts.objective
    screened = screen_mod.screening(ctx, case.cluster, case.opts, Counter(), None)
    pool = screened.pool
    keep = search_mod.refined_per_family(screened.exact)
    refined = search_mod._shortlist(pool, obj, keep)
    refined += [r for c in refined for r in refine(ctx, c)]
    chosen = search_mod._final_list(refined, obj)
    key, fam = plan_key(target.plan), family(target)
    if key in {plan_key(c.plan) for c in chosen}:
        return "shortlisted and simulated by the heuristic"

    def rank_in(cands: Sequence[Candidate]) -> str:
        same = [c for c in cands if family(c) == fam]
        scores = obj.scores([c.estimate for c in same])
        order = sorted(range(len(same)), key=scores.__getitem__)
        where = next(i for i in order if plan_key(same[i].plan) == key)
        return f"rank {order.index(where) + 1} of {len(same)} in {fam} by estimate"

    if key in {plan_key(c.plan) for c in refined}:
        return f"refined, not simulated: {rank_in(refined)}"
    if key in {plan_key(c.plan) for c in pool}:
        return f"screened, not shortlisted: {rank_in(pool)}"
    devices = set(target.plan.devices)
    # A partition may leave slots idle, so a bigger subset can reach the same devices; its
    # micro-batch counts follow its slot count, not the stages used.
    variants = {
        f"{c.label} on {len(c.slots[0]) if c.slots else len(c.plan.devices)} slots"
        for c in pool
        if family(c) == fam and set(c.plan.devices) == devices
    }
    if variants:
        return f"its devices reached for {fam} only as {'; '.join(sorted(variants))}"
    return f"its {len(devices)}-device subset was never screened for {fam}"


def diagnose(case: Case, heur: Ranked, ref: Ranked) -> dict[str, str]:
    """Why the heuristic missed the exhaustive best of ``case``."""
    ctx = context(case)
    obj = case.opts.objective
    target = ref.candidate
    out = {"case": case.key, "funnel": _funnel(ctx, case, target)}
    size = len(target.plan.devices)
    devices = set(target.plan.devices)
    if target.plan.tp > 1:
        ranked = _bound_rank(ctx, case, devices, lambda n: n > 1)
        cap = screen_mod.TP_SUBSETS
    elif target.family == "hybrid":
        ranked, cap = _bound_rank(ctx, case, devices, lambda n: n > 3), screen_mod.PIPELINED_SUBSETS
    elif target.family in ("gpipe", "1f1b", "pipedream"):
        ranked = _bound_rank(ctx, case, devices, lambda n: 1 < n <= 32)
        cap = screen_mod.PIPELINED_SUBSETS
    else:
        ranked, cap = None, 0
    if ranked is not None:
        out["bound rank"] = (
            f"subset ({size} devices) {ranked[0]} of {ranked[1]} (the exact regime screens"
            f" all; past it only the first {cap})"
        )
    for name, r in (("exhaustive best", ref), ("heuristic best", heur)):
        est = obj.scores([r.candidate.estimate])[0]
        out[name] = (
            f"{describe(r)}: estimate {est:.4g}, simulated {r.score:.4g} "
            f"(estimate {100 * (est / r.score - 1):+.1f}%)"
        )
    return out


@dataclass(frozen=True, kw_only=True)
class Sensitivity:
    setting: str
    value: str
    default: bool
    cases: int
    max_gap: float
    mean_gap: float
    over_limit: int
    heuristic_s: float
    heuristic_cpu_s: float
    max_case_cpu_s: float
    simulated: int


def measure(
    cases: Sequence[Case], refs: Mapping[str, Reference], setting: str, changes: Mapping[str, float]
) -> Sensitivity:
    """The heuristic over the grid with ``changes`` applied, against the cached optima."""
    defaults = vars(search_mod) | vars(screen_mod)
    with patched(changes):
        rows = [row for _, row, _ in compare(cases, refs)]
    gaps = [r.gap for r in rows]
    print(f"  {setting}: {dict(changes)}", file=sys.stderr, flush=True)
    return Sensitivity(
        setting=setting,
        value=", ".join(f"{v:g}" for v in changes.values()),
        default=all(math.isclose(v, defaults[k]) for k, v in changes.items()),
        cases=len(rows),
        max_gap=max(gaps),
        mean_gap=statistics.fmean(gaps),
        over_limit=sum(g > GAP_LIMIT for g in gaps),
        heuristic_s=sum(r.heuristic_s for r in rows),
        heuristic_cpu_s=sum(r.heuristic_cpu_s for r in rows),
        max_case_cpu_s=max(r.heuristic_cpu_s for r in rows),
        simulated=sum(r.heuristic_simulated for r in rows),
    )


def sensitivity(cases: Sequence[Case], refs: Mapping[str, Reference]) -> list[Sensitivity]:
    return [
        measure(cases, refs, name, {name: value})
        for name, values in SENSITIVITY.items()
        for value in values
    ]


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def print_rows(rows: Sequence[Row], *, forced: bool = False) -> None:
    extra = " reference subset in regime space |" if forced else ""
    print(
        "| model | cluster | objective | regime | heuristic best | exhaustive best | gap |"
        " heuristic s | exhaustive s | heuristic sims (screened) | exhaustive sims |" + extra
    )
    print("|---" * (12 if forced else 11) + "|")
    for r in rows:
        star = "*" if r.exhaustive_cached else ""
        tail = f" {'yes' if r.reference_in_space else 'no'} |" if forced else ""
        print(
            f"| {r.model} | {r.cluster} | {r.objective} | {r.regime} | {r.heuristic_best} |"
            f" {r.exhaustive_best} | {pct(r.gap)} | {r.heuristic_s:.2f} |"
            f" {r.exhaustive_s:.1f}{star} | {r.heuristic_simulated} ({r.heuristic_screened}) |"
            f" {r.exhaustive_simulated} |" + tail
        )


def summary(label: str, rows: Sequence[Row]) -> None:
    gaps = [r.gap for r in rows]
    if not gaps:
        return
    over = sum(g > GAP_LIMIT for g in gaps)
    wall = sum(r.heuristic_s for r in rows)
    cpu = sum(r.heuristic_cpu_s for r in rows)
    print(
        f"\n{label}: {len(rows)} cases, max gap {pct(max(gaps))},"
        f" mean {pct(statistics.fmean(gaps))}, {over} over {pct(GAP_LIMIT)};"
        f" heuristic {wall:.1f} s wall, {cpu:.1f} s CPU in all"
    )


def print_sensitivity(table: Sequence[Sensitivity]) -> None:
    print(
        "| setting | value | cases | max gap | mean gap | cases > 2% | heuristic wall s |"
        " heuristic CPU s | slowest case CPU s | simulations |"
    )
    print("|---" * 10 + "|")
    for t in table:
        mark = " (default)" if t.default else ""
        print(
            f"| {t.setting} | {t.value}{mark} | {t.cases} | {pct(t.max_gap)} |"
            f" {pct(t.mean_gap)} | {t.over_limit} | {t.heuristic_s:.1f} |"
            f" {t.heuristic_cpu_s:.1f} | {t.max_case_cpu_s:.2f} | {t.simulated} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="2 models x 3 clusters")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    parser.add_argument(
        "--synchronous", action="store_true", help="no asynchronous family (plan's default)"
    )
    parser.add_argument("--no-sensitivity", action="store_true", help="skip the constants' rows")
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)\n")
    with tempfile.TemporaryDirectory() as tmp:
        clusters = load_clusters(args.quick, Path(tmp))
    print("| cluster | devices | orbits | whole-node subsets |\n|---|---|---|---|")
    for name, c in clusters.items():
        sym = symmetry(c)
        print(f"| {name} | {len(c.devices)} | {orbit_count(sym)} | {node_level_count(sym)} |")
    families = FAMILIES
    if args.synchronous:
        families = tuple(f for f in FAMILIES if f not in ASYNCHRONOUS_FAMILIES)
    cases = make_cases(args.quick, clusters, families)
    refs = references(cases)

    main_rows = compare(cases, refs)
    print("\n## Heuristic (default constants) against the exhaustive optimum\n")
    print_rows([r for _, r, _ in main_rows])
    summary("default", [r for _, r, _ in main_rows])

    regime_rows: dict[str, list[tuple[Case, Row, Ranked]]] = {}
    for label, changes in REGIMES.items():
        with patched(changes):
            regime_rows[label] = compare(cases, refs, regime=label)
    print("\n## Heuristic forced out of the exact regime (reference: every orbit)\n")
    print_rows([r for rows in regime_rows.values() for _, r, _ in rows], forced=True)
    for label, rows in regime_rows.items():
        summary(f"{label} regime", [r for _, r, _ in rows])

    print(f"\n## Diagnosis of the gaps over {pct(GAP_LIMIT)} (default constants)\n")
    diagnoses = []
    for case, row, best in main_rows:
        if row.gap > GAP_LIMIT:
            d = diagnose(case, best, refs[case.key].best)
            diagnoses.append(d)
            print(f"- **{d['case']}** (gap {pct(row.gap)})")
            for k, v in d.items():
                if k != "case":
                    print(f"  - {k}: {v}")
    if not diagnoses:
        print("none")

    print("\n## Sensitivity: one constant changed, heuristic rerun over the grid\n")
    table = [] if args.no_sensitivity else sensitivity(cases, refs)
    print_sensitivity(table)
    wall = time.perf_counter() - start
    print(f"\nload average after: {os.getloadavg()[0]:.2f}; wall {wall:.0f} s")
    if args.json is not None:
        data = {
            "cases": [asdict(r) for _, r, _ in main_rows],
            "regimes": {k: [asdict(r) for _, r, _ in v] for k, v in regime_rows.items()},
            "diagnoses": diagnoses,
            "sensitivity": [asdict(t) for t in table],
            "wall_s": wall,
        }
        args.json.write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
