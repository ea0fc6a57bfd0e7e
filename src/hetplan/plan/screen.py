"""Screening: cheap candidates of every family on the device subsets worth it.

Data parallel and the parameter server are estimated on every subset; single pipelines,
hybrids and tensor-parallel variants on the subsets most promising by a balanced bound.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

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
from hetplan.plan.subsets import Space, subset_space
from hetplan.plan.tp import TP_DEGREES, has_tp_units, splits_at, tp_groups
from hetplan.planspec.strategies import spec_of

PS_SUBSETS = 8
"""Subsets (best by the data-parallel estimate) that get a parameter-server candidate when the
subset space is too large to give every subset one."""
PIPELINED_SUBSETS = 8
"""Device subsets (best by a balanced-throughput bound) that get pipelined candidates."""
TP_SUBSETS = 4
"""Subsets (best by the balanced bound) that get tensor-parallel candidates."""


def screen(
    ctx: Context,
    cluster: Cluster,
    opts: SearchOptions,
    rejected: Counter[str],
    progress: Progress | None,
    budget: Budget | None = None,
) -> list[Candidate]:
    """Data parallel on every subset of the symmetric space (``plan.subsets``), the parameter
    server on all of them when the space is small and on the PS_SUBSETS best by the data-
    parallel estimate otherwise; pipelines, hybrids and TP on the most promising."""
    opts = _allowed(ctx, opts, rejected)
    budget = budget or Budget()
    space = subset_space(ctx, cluster, opts, progress, budget)
    fits = [(sel, c) for sel, c in zip(space.selections, space.dp, strict=True) if c is not None]
    if len(space.dp) > len(fits):
        rejected["out of memory"] += len(space.dp) - len(fits)
    pool: list[Candidate] = [c for _, c in fits] if "dp" in opts.families else []
    if "ps" in opts.families:
        multi = [(sel, c) for sel, c in fits if space.sym.size(sel) > 1]
        if not space.exhaustive:
            scores = opts.objective.scores([c.estimate for _, c in multi])
            order = sorted(range(len(multi)), key=scores.__getitem__)
            multi = [multi[i] for i in order[:PS_SUBSETS]]
        pool.extend(ps_candidate(ctx, space.devices(sel), dp) for sel, dp in multi)
    piped = [f for f in opts.families if spec_of(f).shape == "pipeline"]
    sizes = [space.sym.size(sel) for sel in space.selections]
    sels = space.selections
    shallow = [s for s, n in zip(sels, sizes, strict=True) if 1 < n <= MAX_PIPELINE_STAGES]
    deep = [s for s, n in zip(sels, sizes, strict=True) if n > 3]
    work = [(s, True) for s in _promising(ctx, space, shallow if piped else [], opts.objective)]
    hybrid = "hybrid" in opts.families
    work += [(s, False) for s in _promising(ctx, space, deep if hybrid else [], opts.objective)]
    for i, (sel, single) in enumerate(work):
        if budget.stop("screening pipelines"):
            break
        devices = space.devices(sel)
        if single:
            pool.extend(pipeline_candidates(ctx, devices, piped))  # type: ignore[arg-type]
        else:
            pool.extend(hybrid_candidates(ctx, devices))
        if progress is not None:
            progress("screening pipelines", i + 1, len(work))
    if has_tp_units(ctx.graph) and not budget.stop("screening tensor parallelism"):
        pool.extend(_tensor_parallel(ctx, cluster, space, opts))
    if not pool and not rejected:
        rejected["no candidate: no requested strategy applies to these devices"] += 1
    return pool


def _shortlist_by(cands: Sequence[Candidate], objective: Objective, keep: int) -> list[Candidate]:
    scores = objective.scores([c.estimate for c in cands])
    order = sorted(range(len(cands)), key=scores.__getitem__)
    return [cands[i] for i in order[:keep]]


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
    ctx: Context, cluster: Cluster, space: Space, opts: SearchOptions
) -> list[Candidate]:
    """Models with tensor-parallel units (``plan.tp.has_tp_units``): TP groups inside nodes
    as slots of data parallel, single pipelines (gpipe, 1f1b) and hybrids, on the subsets most
    promising by the balanced bound, at every degree some unit splits at. All of these run
    (``hetplan train``); ps, pipedream and wsp get no TP variant (``search.unrunnable``)."""
    out: list[Candidate] = []
    piped = [
        f for f in opts.families if spec_of(f).shape == "pipeline" and spec_of(f).tensor_parallel
    ]
    multi = [s for s in space.selections if space.sym.size(s) > 1]
    degrees = [tp for tp in TP_DEGREES if splits_at(ctx.graph, tp)]
    for sel in _promising(ctx, space, multi, opts.objective)[:TP_SUBSETS]:
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
    """The PIPELINED_SUBSETS subsets best by a perfectly balanced bound: every device busy,
    the batch done at the summed throughput of the subset (no bubble, no communication);
    priced from class counts."""
    if len(sels) <= PIPELINED_SUBSETS:
        return list(sels)
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
    return [sels[i] for i in order[:PIPELINED_SUBSETS]]
