"""The plan search: enumerate candidates, screen them, simulate the best, rank, explain.

1. Device subsets by counts over the cluster's symmetry (``plan.subsets``); for each,
   candidates of every strategy family with a closed-form screening estimate (``screen``).
2. Per family, the best few by the objective on the estimate are predicted for real (event-
   driven simulation, memory model); infeasible ones and limit breakers are rejected and counted
   by reason.
3. The rest are ranked by the objective on the prediction; the baselines (data parallel with
   an equal batch split, equal-layer GPipe, both over all devices) are always predicted.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from hetplan.cluster.resolve import MAX_RESOLVED_DEVICES
from hetplan.cluster.spec import Cluster
from hetplan.cost.types import ComputeModel
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.plan.candidates import dp_candidate, equal_pipeline, refine
from hetplan.plan.context import Candidate, Context
from hetplan.plan.explain import reasons
from hetplan.plan.objective import Limits, Metrics, Objective, pareto_front
from hetplan.plan.options import Budget, Progress, SearchOptions
from hetplan.plan.pricing import Pricing
from hetplan.plan.screen import screening
from hetplan.plan.sharded import sharded_hybrid
from hetplan.plan.tp import untraced_notes
from hetplan.planspec.plan import ModelRef, Plan
from hetplan.planspec.strategies import spec_of
from hetplan.predict import Prediction, predict
from hetplan.schedule.builder import paused_gc
from hetplan.serde import to_data

__all__ = ["Ranked", "Ranking", "SearchOptions", "search"]

MAX_SEARCH_DEVICES = MAX_RESOLVED_DEVICES
"""Largest cluster searched (every resolvable one): its devices are materialised once (ids,
pricing keys), and a 10,000-device search takes ~7 s here (docs/benchmarks.md, "Planner
speed")."""
CLOSE_FAMILY_RATIO = 1.5
"""Families whose best estimate is within this factor of the best get SIMULATED_PER_FAMILY
simulations; the others get one (to show in the table)."""
REFINED_PER_FAMILY = 4
"""Screened candidates per family whose micro-batch count is refined (outside the exact
regime)."""
EXACT_REFINED_PER_FAMILY = 16
"""The same in the exact regime, where every family is screened on every subset. The coarse
count (2 per stage) ranks a family before refinement, and a pipeline's best count can be far
from it: on the exactness benchmark (docs/benchmarks.md, issue 27) the pick that matches the
optimum of vgg11 on gen-2type is a 7-stage PipeDream refined from 16 micro-batches (estimate
0.0061 s) to 8 (0.0040 s), its coarse candidate 8th of 444 in the family. Keeping 4 leaves it
2.5% away, 8 reaches it with no margin, 16 leaves some for +5% of the heuristic's CPU over
the 60 cases (+0-5% for a 96-block GPT on 16-24 GPUs). Refining costs partitions, not
simulations (SIMULATED_PER_FAMILY caps those)."""
SIMULATED_PER_FAMILY = 3
"""Refined candidates per family that get a full simulation."""
PARETO_SIMULATED = 12
"""Most members of the screening estimates' time-energy front simulated whatever the
objective (spread evenly along it), so that the reported front is the same for every
objective."""


@dataclass(frozen=True, kw_only=True)
class Ranked:
    """A simulated candidate."""

    candidate: Candidate
    prediction: Prediction
    metrics: Metrics
    score: float
    outside_limits: tuple[str, ...] = ()
    """The limits the plan breaks (``3 devices > limit 2``): only a baseline, simulated for
    comparison, is ranked with any; it cannot win."""


@dataclass(kw_only=True)
class Ranking:
    """The outcome of a search."""

    objective: Objective
    ranked: list[Ranked]
    """Feasible candidates within the limits, best first: those that fit with the feasibility
    margin by score, then those that may not fit (``Prediction.memory_warnings``) by score."""
    baselines: dict[str, Ranked]
    rejected: Counter[str] = field(default_factory=Counter)
    pareto: list[Ranked] = field(default_factory=list)
    """Time-energy Pareto front of the ranked candidates, fastest first. The simulated
    candidates always include the front of every screened candidate's estimate, so its ends
    and most of its points do not depend on the objective; the objective's own shortlist may
    add points (never a point that a shown candidate dominates)."""
    screened: int = 0
    """Candidates generated and estimated."""
    simulated: int = 0
    """Candidates predicted with the simulator."""
    reasons: list[str] = field(default_factory=list)
    baseline_failures: dict[str, str] = field(default_factory=dict)
    """Baselines that cannot run, with the first reason."""
    time_limited: list[str] = field(default_factory=list)
    """Phases the time limit cut short (empty: the search ran to the end)."""
    notes: list[str] = field(default_factory=list)
    """What the model kept out of the search (a block torch.fx could not trace: no TP plan)."""
    limits: Limits = field(default_factory=Limits)
    """The limits searched under (the reasons name one that left devices out)."""

    @property
    def best(self) -> Ranked:
        return self.ranked[0]


def search(
    model: ModelRef,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    opts: SearchOptions,
    progress: Progress | None = None,
) -> Ranking:
    """Find the best plans for ``opts.objective`` under ``opts.limits``."""
    # The search allocates millions of small objects and keeps every finalist's timeline:
    # with the cyclic collector on, its full collections rescan them all (4 of 33 CPU
    # seconds of a 10,000-device search), and find a few dozen objects in cycles. Those
    # wait for the next collection after the search.
    with paused_gc():
        return _search(model, graph, cluster, compute, opts, progress)


def _search(
    model: ModelRef,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    opts: SearchOptions,
    progress: Progress | None,
) -> Ranking:
    if len(cluster.devices) > MAX_SEARCH_DEVICES:
        raise InputError(
            f"cluster {cluster.name!r} has {len(cluster.devices):,} devices; the planner "
            f"searches clusters of at most {MAX_SEARCH_DEVICES:,} (docs/planning.md)"
        )
    ctx = make_context(model, graph, cluster, compute, opts)
    rejected: Counter[str] = Counter()
    budget = Budget(opts.time_limit_s)
    screened = screening(ctx, cluster, opts, rejected, progress, budget)
    pool = screened.pool
    refined = _shortlist(pool, opts.objective, refined_per_family(screened.exact))
    if not budget.stop("refining micro-batches"):
        refined += [r for c in refined for r in refine(ctx, c)]
    # Each sharded variant is simulated to be estimated: only where the space is small enough
    # to be screened exactly (a datacenter's hybrids take seconds each).
    if screened.exact and "hybrid" in opts.families and not budget.stop("sharding stages"):
        found = (sharded_hybrid(ctx, c) for c in _shortlist(refined, opts.objective, 1))
        refined += [c for c in found if c is not None]
    chosen = _final_list(refined, opts.objective)
    failures: dict[str, str] = {}
    base = list(baselines(ctx, cluster, failures).values())
    front = _estimated_front(pool)
    # Under a time limit the most promising candidates go first, the baselines and the rest
    # of the front last.
    todo = unique(chosen + base + front if opts.time_limit_s is not None else base + chosen + front)
    simulated = simulate(ctx, todo, opts, rejected, failures, progress, budget)
    ranking = rank(simulated, opts, rejected)
    ranking.screened = len(pool)
    ranking.simulated = budget.simulated
    ranking.baseline_failures = failures
    ranking.time_limited = budget.cut
    ranking.reasons = reasons(ranking, cluster)
    ranking.notes = untraced_notes(graph) + margin_notes(ranking.ranked)
    return ranking


def margin_notes(ranked: Sequence[Ranked]) -> list[str]:
    """What the feasibility margin did to the ranking (``cost.memory_margin``): plans that may
    not fit are ranked after those that fit; say so when one of them scored better than the
    pick, and when no plan fits with the margin."""
    tight = [r for r in ranked if r.prediction.memory_verdict != "fits"]
    if not tight:
        return []
    if len(tight) == len(ranked):
        first = tight[0].prediction.memory_warnings[0]
        return [
            f"no plan fits with the feasibility margin; the pick may run out of memory: {first}"
        ]
    notes = [
        f"{len(tight)} of {len(ranked)} ranked plans may not fit (feasibility margin, "
        "docs/cost-models.md section 6): ranked after the plans that fit"
    ]
    best = min(tight, key=lambda r: r.score)
    if best.score < ranked[0].score:
        notes.append(
            f"a {best.candidate.family} plan scores better than the pick "
            f"({best.prediction.iteration_time_s:.4g} s per iteration) but may not fit: "
            f"{best.prediction.memory_warnings[0]}"
        )
    return notes


def make_context(
    model: ModelRef, graph: ModelGraph, cluster: Cluster, compute: ComputeModel, opts: SearchOptions
) -> Context:
    """The caches and settings of one search over ``cluster``."""
    return Context(
        model=model,
        graph=graph,
        pricing=Pricing(graph=graph, cluster=cluster, compute=compute),
        batch=opts.batch,
        optimizer=opts.optimizer,
        cluster_name=cluster.name,
    )


def refined_per_family(exact: bool) -> int:
    """Screened candidates per family to refine: more where the space is exact (every
    subset screened), the cost of which stays bounded by MAX_EXHAUSTIVE_SUBSETS orbits."""
    return EXACT_REFINED_PER_FAMILY if exact else REFINED_PER_FAMILY


def _shortlist(pool: Sequence[Candidate], objective: Objective, keep: int) -> list[Candidate]:
    """The best ``keep`` of each family by the objective on the screening estimate."""
    by_family: dict[str, list[Candidate]] = {}
    for c in pool:
        by_family.setdefault(c.family, []).append(c)
    out: list[Candidate] = []
    for members in by_family.values():
        scores = objective.scores([c.estimate for c in members])
        order = sorted(range(len(members)), key=scores.__getitem__)
        out.extend(members[i] for i in order[:keep])
    return out


def _estimated_front(pool: Sequence[Candidate]) -> list[Candidate]:
    """Up to PARETO_SIMULATED members of the time-energy front of every screened candidate's
    estimate, fastest first, both ends kept."""
    members = [
        pool[i] for i in pareto_front([(c.estimate.time_s, c.estimate.energy_j) for c in pool])
    ]
    if len(members) <= PARETO_SIMULATED:
        return members
    step = (len(members) - 1) / (PARETO_SIMULATED - 1)
    return [members[round(k * step)] for k in range(PARETO_SIMULATED)]


def _final_list(pool: Sequence[Candidate], objective: Objective) -> list[Candidate]:
    """SIMULATED_PER_FAMILY of each family close to the best estimate, one of the others;
    best estimate first."""
    if not pool:
        return []
    scores = dict(zip(map(id, pool), objective.scores([c.estimate for c in pool]), strict=True))
    best = min(scores.values())
    out = []
    for fam in dict.fromkeys(c.family for c in pool):  # not a set: same order every run
        members = sorted((c for c in pool if c.family == fam), key=lambda c: scores[id(c)])
        close = scores[id(members[0])] <= CLOSE_FAMILY_RATIO * best
        out.extend(members[: SIMULATED_PER_FAMILY if close else 1])
    return sorted(out, key=lambda c: scores[id(c)])


def plan_key(cand: Candidate) -> str:
    """The candidate's plan as canonical JSON: equal plans, equal keys."""
    return json.dumps(to_data(cand.plan), sort_keys=True)


def unique(cands: Sequence[Candidate]) -> list[Candidate]:
    """Drop candidates whose plan equals an earlier one (different routes reach the same
    plan, e.g. data parallel by speed and by equal split on identical devices)."""
    seen: set[str] = set()
    out = []
    for c in cands:
        key = plan_key(c)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def baselines(ctx: Context, cluster: Cluster, failures: dict[str, str]) -> dict[str, Candidate]:
    devices = [d.id for d in cluster.devices][: ctx.batch]
    out = {}
    dp = dp_candidate(ctx, devices, equal=True)
    if dp is not None:
        out["dp-equal"] = dp
    else:
        failures["dp-equal"] = "out of memory: a replica does not fit at any gradient accumulation"
    if ctx.graph.split_error is not None:
        failures["equal-pipeline"] = ctx.graph.split_error
    elif len(devices) > 1:
        out["equal-pipeline"] = equal_pipeline(ctx, devices)
    return out


def simulate(
    ctx: Context,
    cands: Sequence[Candidate],
    opts: SearchOptions,
    rejected: Counter[str],
    failures: dict[str, str],
    progress: Progress | None,
    budget: Budget | None = None,
) -> list[tuple[Candidate, Prediction, Metrics]]:
    """Predict ``cands`` in order; past the budget's limit, stop once a candidate that can win
    (not a baseline) is feasible, and mark the baselines left as not simulated."""
    out: list[tuple[Candidate, Prediction, Metrics]] = []
    best = math.inf
    for i, cand in enumerate(cands):
        can_win = any(c.baseline is None for c, _, _ in out)
        if budget is not None and can_win and budget.stop("simulating"):
            for c in cands[i:]:
                if c.baseline is not None:
                    failures[c.baseline] = "not simulated: the search's time limit was reached"
            break
        pred = predict(
            cand.plan,
            ctx.graph,
            ctx.pricing.cluster,
            ctx.pricing.compute,
            dataset_size=opts.dataset_size,
        )
        if budget is not None:
            budget.simulated += 1
        if pred.feasible:
            best = min(best, pred.iteration_time_s)
        if progress is not None:
            progress("simulating", i + 1, len(cands), best=_seconds(best))
        if not pred.feasible:
            if cand.baseline is None:
                rejected[_reason_key(pred.infeasible_reasons)] += 1
            else:
                failures[cand.baseline] = (pred.infeasible_reasons or ["infeasible"])[0]
            continue
        out.append((cand, pred, metrics_of(cand.plan, pred)))
    return out


def _seconds(value: float) -> str:
    return "" if math.isinf(value) else f"{value:.4g} s per iteration"


def _reason_key(reasons: Sequence[str]) -> str:
    text = reasons[0] if reasons else "infeasible"
    return "out of memory" if "memory" in text else text.split(":")[0]


def metrics_of(plan: Plan, pred: Prediction) -> Metrics:
    """The objective's view of a prediction."""
    return Metrics(
        time_s=pred.iteration_time_s,
        samples_per_s=pred.samples_per_s,
        power_w=pred.power_w,
        energy_j=pred.energy_j_per_iteration,
        dollars=pred.dollars_per_iteration,
        devices=len(plan.devices),
    )


def unrunnable(plan: Plan) -> str | None:
    """Why ``hetplan train`` cannot run ``plan`` (the spec's rule, as the runtime checks it)."""
    return spec_of(plan).why_unrunnable(plan)


def rank(
    simulated: Sequence[tuple[Candidate, Prediction, Metrics]],
    opts: SearchOptions,
    rejected: Counter[str],
) -> Ranking:
    """Rank ``simulated`` by the objective; the Pareto front over every ranked candidate."""
    iterations = _iterations(opts)
    kept = []
    for cand, pred, met in simulated:
        broken = tuple(opts.limits.violations(met, iterations))
        if broken and cand.baseline is None:
            rejected[f"limit: {_limit_name(broken[0])}"] += 1
            continue
        kept.append((cand, pred, met, broken))
    scores = opts.objective.scores([m for _, _, m, _ in kept])
    ranked_all = [
        Ranked(candidate=c, prediction=p, metrics=m, score=s, outside_limits=broken)
        for (c, p, m, broken), s in zip(kept, scores, strict=True)
    ]
    ranked_all.sort(key=lambda r: (r.prediction.memory_verdict != "fits", r.score))
    base = {r.candidate.baseline: r for r in ranked_all if r.candidate.baseline is not None}
    # Baselines are always predicted for comparison, but only requested families can win.
    within = [
        r
        for r in ranked_all
        if r.candidate.family in opts.families
        and not r.outside_limits
        and not (opts.runnable_only and unrunnable(r.candidate.plan))
    ]
    on_front = pareto_front([(r.metrics.time_s, r.metrics.energy_j) for r in within])
    return Ranking(
        objective=opts.objective,
        ranked=within,
        baselines={k: v for k, v in base.items() if k is not None},
        rejected=rejected,
        pareto=[within[i] for i in on_front],
        limits=opts.limits,
    )


def _limit_name(violation: str) -> str:
    """The limit a :meth:`Limits.violations` line names: ``power``, ``devices``, ``time``..."""
    words = violation.split(" ")
    return "devices" if words[1:2] == ["devices"] else words[0]


def _iterations(opts: SearchOptions) -> float:
    if opts.dataset_size is None:
        return 1.0
    return opts.dataset_size / opts.batch
