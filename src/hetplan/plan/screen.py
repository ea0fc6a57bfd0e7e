"""Screening: cheap candidates of every family on the device subsets worth it.

Data parallel is estimated on every subset. In the exact regime (every subset orbit
enumerated, ``plan.subsets``) every family is screened on every subset, so the search can
reach the optimum of its space (``benchmarks/bench_exactness.py``). Past it, the parameter
server goes on the subsets best by the data-parallel estimate and single pipelines, hybrids
and tensor-parallel variants on the subsets most promising by a balanced bound.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.cluster.spec import Cluster
from hetplan.plan.candidates import (
    MAX_PIPELINE_STAGES,
    dp_candidate,
    hybrid_candidates,
    pipeline_candidates,
    ps_candidate,
)
from hetplan.plan.classes import Selection
from hetplan.plan.context import Candidate, Context
from hetplan.plan.objective import Objective
from hetplan.plan.options import RUNNABLE, Budget, Progress, SearchOptions
from hetplan.plan.sharded import fsdp_candidate, zero1_candidate
from hetplan.plan.subsets import Space, subset_space
from hetplan.plan.tp import TP_DEGREES, has_tp_units, splits_at, tp_groups
from hetplan.planspec.strategies import spec_of

PS_SUBSETS = 8
"""Subsets (best by the data-parallel estimate) that get a parameter-server candidate when the
subset space is too large to give every subset one."""
PIPELINED_SUBSETS = 8
"""Device subsets (best by a balanced-throughput bound) that get pipelined candidates outside
the exact regime; in it, every subset does: the bound leaves out communication and bubbles,
so it favours large subsets, and capped at 8 there it left 5 of the exactness benchmark's 60
cases 5.6-29.6% from the optimum (pipelines on 4 or 8 of 8-16 GPUs, their subsets ranked
21st-161st by the bound; docs/benchmarks.md, issue 27)."""
TP_SUBSETS = 4
"""Subsets (best by the balanced bound) that get tensor-parallel candidates outside the exact
regime; in it, every subset of more than one device does."""


@dataclass(frozen=True)
class Screening:
    """The screened candidates, and whether they cover every subset of the device-level space
    (the exact regime: the search then refines more of them, ``search.refined_per_family``)."""

    pool: list[Candidate]
    exact: bool


def screen(
    ctx: Context,
    cluster: Cluster,
    opts: SearchOptions,
    rejected: Counter[str],
    progress: Progress | None,
    budget: Budget | None = None,
) -> list[Candidate]:
    """The candidates of :func:`screening`."""
    return screening(ctx, cluster, opts, rejected, progress, budget).pool


def screening(
    ctx: Context,
    cluster: Cluster,
    opts: SearchOptions,
    rejected: Counter[str],
    progress: Progress | None,
    budget: Budget | None = None,
) -> Screening:
    """Data parallel on every subset of the symmetric space (``plan.subsets``); in the exact
    regime every other family on every subset too, past it the parameter server on the
    PS_SUBSETS best by the data-parallel estimate and pipelines, hybrids and TP on the most
    promising by the balanced bound."""
    opts = _allowed(ctx, opts, rejected)
    budget = budget or Budget()
    space = subset_space(ctx, cluster, opts, progress, budget)
    fits = [(sel, c) for sel, c in zip(space.selections, space.dp, strict=True) if c is not None]
    if len(space.dp) > len(fits):
        rejected["out of memory"] += len(space.dp) - len(fits)
    pool: list[Candidate] = [c for _, c in fits] if "dp" in opts.families else []
    if "ps" in opts.families:
        pool.extend(_parameter_server(ctx, space, fits, opts.objective))
    if "fsdp" in opts.families:
        pool.extend(_zero1(ctx, space, fits, opts.objective))
        sharded = _sharded(ctx, space, opts.objective)
        pool.extend(c for c in sharded if c is not None)
        if None in sharded:
            rejected["fsdp: out of memory at every micro-batch count"] += sharded.count(None)
    pool.extend(_pipelined(ctx, space, opts, progress, budget))
    if has_tp_units(ctx.graph) and not budget.stop("screening tensor parallelism"):
        pool.extend(_tensor_parallel(ctx, cluster, space, opts, budget))
    if not pool and not rejected:
        rejected["no candidate: no requested strategy applies to these devices"] += 1
    return Screening(pool=pool, exact=space.exhaustive)


def _dp_based(
    space: Space, fits: Sequence[tuple[Selection, Candidate]], objective: Objective
) -> list[tuple[Selection, Candidate]]:
    """The multi-device subsets whose data-parallel candidate the families priced as data
    parallel plus a sync start from: every one of an exact space, else the PS_SUBSETS best by
    the data-parallel estimate."""
    multi = [(sel, c) for sel, c in fits if space.size(sel) > 1]
    if not space.exhaustive:
        scores = objective.scores([c.estimate for _, c in multi])
        order = sorted(range(len(multi)), key=scores.__getitem__)
        multi = [multi[i] for i in order[:PS_SUBSETS]]
    return multi


def _parameter_server(
    ctx: Context,
    space: Space,
    fits: Sequence[tuple[Selection, Candidate]],
    objective: Objective,
) -> list[Candidate]:
    """A parameter server on :func:`_dp_based`'s subsets."""
    return [
        ps_candidate(ctx, space.devices(sel), dp) for sel, dp in _dp_based(space, fits, objective)
    ]


def _zero1(
    ctx: Context,
    space: Space,
    fits: Sequence[tuple[Selection, Candidate]],
    objective: Objective,
) -> list[Candidate]:
    """ZeRO-1 where data parallelism fits (it holds less), on :func:`_dp_based`'s subsets."""
    found = (zero1_candidate(ctx, dp) for _, dp in _dp_based(space, fits, objective))
    return [c for c in found if c is not None]


def _sharded(ctx: Context, space: Space, objective: Objective) -> list[Candidate | None]:
    """Sharded data parallelism on every multi-device subset of an exact space, else on the
    PIPELINED_SUBSETS most promising by the balanced bound (whether or not data parallelism
    fits there: sharding is what makes a model fit that no device holds whole); None where
    no micro-batch count fits."""
    multi = [s for s in space.selections if space.size(s) > 1]
    return [
        fsdp_candidate(ctx, space.devices(sel)) for sel in _promising(ctx, space, multi, objective)
    ]


def _pipelined(
    ctx: Context,
    space: Space,
    opts: SearchOptions,
    progress: Progress | None,
    budget: Budget,
) -> list[Candidate]:
    """Single pipelines (2 to MAX_PIPELINE_STAGES devices) and hybrids (more than 3) on the
    subsets :func:`_promising` picks, most promising first (so a time limit cuts the rest)."""
    piped = [f for f in opts.families if spec_of(f).shape == "pipeline"]
    sizes = [space.size(sel) for sel in space.selections]
    sels = space.selections
    shallow = [s for s, n in zip(sels, sizes, strict=True) if 1 < n <= MAX_PIPELINE_STAGES]
    deep = [s for s, n in zip(sels, sizes, strict=True) if n > 3]
    work = [(s, True) for s in _promising(ctx, space, shallow if piped else [], opts.objective)]
    hybrid = "hybrid" in opts.families
    work += [(s, False) for s in _promising(ctx, space, deep if hybrid else [], opts.objective)]
    out: list[Candidate] = []
    for i, (sel, single) in enumerate(work):
        if budget.stop("screening pipelines"):
            break
        devices = space.devices(sel)
        if single:
            out.extend(pipeline_candidates(ctx, devices, piped))  # type: ignore[arg-type]
        else:
            out.extend(hybrid_candidates(ctx, devices))
        if progress is not None:
            progress("screening pipelines", i + 1, len(work))
    return out


def _allowed(ctx: Context, opts: SearchOptions, rejected: Counter[str]) -> SearchOptions:
    """The families to screen: runnable ones unless what-if, none cut into stages where the
    model's forward cannot be cut (each exclusion counted with its reason)."""
    families = opts.families
    if opts.runnable_only:
        families = tuple(f for f in families if f in RUNNABLE)
    if ctx.graph.split_error is not None:
        piped = [f for f in families if spec_of(f).shape != "replicas"]
        if piped:
            rejected[f"{', '.join(piped)}: {ctx.graph.split_error}"] += 1
        families = tuple(f for f in families if f not in piped)
    return dataclasses.replace(opts, families=families)


def _tensor_parallel(
    ctx: Context, cluster: Cluster, space: Space, opts: SearchOptions, budget: Budget
) -> list[Candidate]:
    """Models with tensor-parallel units (``plan.tp.has_tp_units``): TP groups inside nodes
    as slots of data parallel, single pipelines (gpipe, 1f1b) and hybrids, on every multi-
    device subset of an exact space and otherwise on the TP_SUBSETS most promising by the
    balanced bound, at every degree some unit splits at. All of these run (``hetplan
    train``); ps, pipedream and wsp get no TP variant (``search.unrunnable``)."""
    out: list[Candidate] = []
    piped = [
        f for f in opts.families if spec_of(f).shape == "pipeline" and spec_of(f).tensor_parallel
    ]
    multi = [s for s in space.selections if space.size(s) > 1]
    degrees = [tp for tp in TP_DEGREES if splits_at(ctx.graph, tp)]
    chosen = _promising(ctx, space, multi, opts.objective)
    for sel in chosen if space.exhaustive else chosen[:TP_SUBSETS]:
        if budget.stop("screening tensor parallelism"):
            break
        devices = space.devices(sel)
        for tp in degrees:
            groups = tp_groups(cluster, devices, tp)
            if groups is None:
                continue
            dp = dp_candidate(ctx, groups)
            if dp is not None and "dp" in opts.families:
                out.append(dp)
            if len(groups) > 1:
                out.extend(pipeline_candidates(ctx, groups, piped, orders=1))  # type: ignore[arg-type]
            if len(groups) > 3 and "hybrid" in opts.families:
                out.extend(hybrid_candidates(ctx, groups))
    return out


def _promising(
    ctx: Context, space: Space, sels: Sequence[Selection], objective: Objective
) -> list[Selection]:
    """Every one of ``sels`` in the exact regime (best by the balanced bound first), else the
    PIPELINED_SUBSETS best by it."""
    if space.exhaustive:
        return by_bound(ctx, space, sels, objective)
    if len(sels) <= PIPELINED_SUBSETS:
        return list(sels)
    return by_bound(ctx, space, sels, objective)[:PIPELINED_SUBSETS]


def by_bound(
    ctx: Context, space: Space, sels: Sequence[Selection], objective: Objective
) -> list[Selection]:
    """``sels`` best first by a perfectly balanced bound: every device busy, the batch done
    at the summed throughput of the subset (no bubble, no communication); priced from class
    counts. It favours large subsets, so it only orders the exact regime's subsets and picks
    past it."""
    classes = space.sym.classes
    speed = [ctx.pricing.speed(c.rep, 1) for c in classes]
    bounds = []
    for sel in sels:
        counts = space.sym.counts(sel)
        time_s = ctx.batch / sum(n * v for n, v in zip(counts, speed, strict=True))
        rows = [(c.rep, n, time_s) for c, n in zip(classes, counts, strict=True) if n]
        bounds.append(ctx.metrics_counts(time_s, rows))
    scores = objective.scores(bounds)
    order = sorted(range(len(sels)), key=scores.__getitem__)
    return [sels[i] for i in order]
