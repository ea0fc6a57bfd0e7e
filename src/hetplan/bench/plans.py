"""The plans the suite runs: the fixed strategies with equal splits, and the planner's pick."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hetplan.bench.suite import (
    PLANNER_FAMILIES,
    SUITE_STALENESS,
    TP_DEGREE,
    micro_batches,
)
from hetplan.cluster import Cluster
from hetplan.cost.types import ComputeModel
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.plan.objective import parse_objective
from hetplan.plan.search import Ranking, SearchOptions, search
from hetplan.planspec import ModelRef, Plan
from hetplan.planspec.strategies import SUITE_VARIANTS, spec_of
from hetplan.predict import plan_from_options
from hetplan.run.setup.model import source_for
from hetplan.run.train import check_plan

VARIANT_FIELDS: dict[str, dict[str, Any]] = {
    "ps-async": {"ps_async": True, "staleness": SUITE_STALENESS},
    "wsp": {"sync": "wsp", "staleness": SUITE_STALENESS},
    "zero1": {"zero": 1},
    "hybrid-fsdp": {"shard_stages": True},
}
"""The plan fields of each variant the suite runs (keys: ``SUITE_VARIANTS``)."""


def fixed_plan(
    strategy: str, graph: ModelGraph, cluster: Cluster, ref: ModelRef, batch: int
) -> Plan:
    """``strategy`` (a suite case name: a strategy, an asynchronous variant or ``tp``) over all
    of the cluster's devices with equal splits: the batch split evenly over replicas (dp,
    hybrid), an equal number of layers per stage (the baselines the heterogeneity-aware planner
    is compared with)."""
    n = len(cluster.devices)
    if strategy == "tp":
        return plan_from_options(
            graph, cluster, model=ref, strategy="dp", batch=batch, dp=n // TP_DEGREE,
            tp=TP_DEGREE,
        )  # fmt: skip
    base = SUITE_VARIANTS.get(strategy, strategy)
    spec = spec_of(base)
    fields: dict[str, Any] = dict(VARIANT_FIELDS.get(strategy, {}))
    if spec.hosts_parameters:  # a server shard on every worker
        fields["ps_devices"] = [d.id for d in cluster.devices]
    if spec.shape == "replicas":
        return plan_from_options(graph, cluster, model=ref, strategy=base, batch=batch, **fields)
    if spec.shape == "pipelines":  # two pipelines of half the devices
        pp = n // 2
        return plan_from_options(
            graph, cluster, model=ref, strategy=base, batch=batch, dp=2, pp=pp,
            micro_batches=micro_batches(batch // 2, pp), **fields,
        )  # fmt: skip
    m = micro_batches(batch, n)
    return plan_from_options(
        graph, cluster, model=ref, strategy=base, batch=batch, micro_batches=m, **fields
    )


def plan_label(plan: Plan) -> str:
    """``1f1b 1x2 m=4 layers 3/3 b=16``: strategy, pipelines x stages, micro-batches, layers
    per stage, batch per pipeline."""
    pipe = plan.pipelines[0]
    sizes = [len(s.layers) for s in pipe.stages]
    bounds = "/".join(str(x) for x in sizes)
    batches = "+".join(str(p.batch) for p in plan.pipelines)
    tp = f" tp{plan.tp}" if plan.tp > 1 else ""
    if plan.strategy == "dp":
        return f"dp x{len(plan.pipelines)}{tp} b={batches}"
    if plan.strategy == "ps":
        mode = f"async s={plan.staleness}" if plan.ps_async else "sync"
        return f"ps x{len(plan.pipelines)} {mode} b={batches}"
    if plan.strategy == "fsdp":
        return f"fsdp x{len(plan.pipelines)} zero-{plan.zero} m={plan.micro_batches} b={batches}"
    if plan.sync == "wsp":
        return (
            f"wsp D={plan.staleness} {len(plan.pipelines)}x{len(pipe.stages)} "
            f"m={plan.micro_batches} layers {bounds} b={batches}"
        )
    sharded = f" fsdp zero-{plan.zero}" if plan.shard_stages else ""
    return (
        f"{plan.strategy} {len(plan.pipelines)}x{len(pipe.stages)}{tp}{sharded} "
        f"m={plan.micro_batches} layers {bounds} b={batches}"
    )


@dataclass(kw_only=True)
class Pick:
    """The planner's best executable plan and the search behind it."""

    plan: Plan | None
    ranking: Ranking
    search_s: float
    notes: list[str] = field(default_factory=list)


def planner_pick(
    ref: ModelRef,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    batch: int,
    *,
    run_check: bool = True,
) -> Pick:
    """Search for the fastest plan among the planner's families (``plan``'s default:
    synchronous); the best ranked plan that the runtime can execute (ranked plans it cannot
    are noted)."""
    opts = SearchOptions(batch=batch, objective=parse_objective("time"),
                         families=PLANNER_FAMILIES)  # fmt: skip
    start = time.perf_counter()
    ranking = search(ref, graph, cluster, compute, opts)
    seconds = time.perf_counter() - start
    pick = Pick(plan=None, ranking=ranking, search_s=seconds)
    if not run_check:
        return pick
    source = source_for(ref)
    for i, ranked in enumerate(ranking.ranked):
        try:
            check_plan(ranked.candidate.plan, cluster, source)
        except InputError as err:
            pick.notes.append(f"planner's #{i + 1} ({ranked.candidate.label}) skipped: {err}")
            continue
        pick.plan = ranked.candidate.plan
        return pick
    pick.notes.append("no ranked plan is executable")
    return pick
