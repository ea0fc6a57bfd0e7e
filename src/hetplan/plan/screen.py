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
from hetplan.plan.context import Candidate, Context
from hetplan.plan.devices import subsets
from hetplan.plan.objective import Objective
from hetplan.plan.options import RUNNABLE, Progress, SearchOptions
from hetplan.plan.tp import TP_DEGREES, has_tp_units, splits_at, tp_groups

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
) -> list[Candidate]:
    """Data parallel and PS on every subset; pipelines and hybrids on the most promising."""
    opts = _allowed(ctx, opts, rejected)
    subs = [s for s in subsets(cluster, opts.limits.max_devices) if len(s) <= ctx.batch]
    pool: list[Candidate] = []
    for devices in subs:
        dp = dp_candidate(ctx, devices)
        if dp is None:
            rejected["out of memory"] += 1
            continue
        pool += [dp] if "dp" in opts.families else []
        if "ps" in opts.families and len(devices) > 1:
            pool.append(ps_candidate(ctx, devices, dp))
    piped = [s for s in ("gpipe", "1f1b", "pipedream") if s in opts.families]
    shallow = [s for s in subs if 1 < len(s) <= MAX_PIPELINE_STAGES] if piped else []
    deep = [s for s in subs if len(s) > 3] if "hybrid" in opts.families else []
    work = [(s, True) for s in _promising(ctx, shallow, opts.objective)]
    work += [(s, False) for s in _promising(ctx, deep, opts.objective)]
    for i, (devices, single) in enumerate(work):
        if single:
            pool.extend(pipeline_candidates(ctx, devices, piped))  # type: ignore[arg-type]
        else:
            pool.extend(hybrid_candidates(ctx, devices))
        if progress is not None:
            progress("screening", i + 1, len(work))
    if has_tp_units(ctx.graph):
        pool.extend(_tensor_parallel(ctx, cluster, subs, opts))
    if not pool and not rejected:
        rejected["no candidate: no requested strategy applies to these devices"] += 1
    return pool


def _allowed(ctx: Context, opts: SearchOptions, rejected: Counter[str]) -> SearchOptions:
    """The families to screen: runnable ones unless what-if, none cut into stages where the
    model's forward cannot be cut (each exclusion counted with its reason)."""
    families = opts.families
    if opts.runnable_only:
        families = tuple(f for f in families if f in RUNNABLE)
    if ctx.graph.split_error is not None:
        piped = [f for f in families if f not in ("dp", "ps")]
        if piped:
            rejected[f"{', '.join(piped)}: {ctx.graph.split_error}"] += 1
        families = tuple(f for f in families if f in ("dp", "ps"))
    return dataclasses.replace(opts, families=families)


def _tensor_parallel(
    ctx: Context, cluster: Cluster, subs: Sequence[tuple[str, ...]], opts: SearchOptions
) -> list[Candidate]:
    """Models with tensor-parallel units (``plan.tp.has_tp_units``): TP groups inside nodes
    as slots of data parallel, single pipelines (gpipe, 1f1b) and hybrids, on the subsets most
    promising by the balanced bound, at every degree some unit splits at. All of these run
    (``hetplan train``); ps, pipedream and wsp get no TP variant (``search.unrunnable``)."""
    out: list[Candidate] = []
    piped = [s for s in ("gpipe", "1f1b") if s in opts.families]
    multi = [s for s in subs if len(s) > 1]
    degrees = [tp for tp in TP_DEGREES if splits_at(ctx.graph, tp)]
    for devices in _promising(ctx, multi, opts.objective)[:TP_SUBSETS]:
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
    ctx: Context, subs: Sequence[tuple[str, ...]], objective: Objective
) -> list[tuple[str, ...]]:
    """The PIPELINED_SUBSETS subsets best by a perfectly balanced bound: every device busy,
    the batch done at the summed throughput of the subset (no bubble, no communication)."""
    if len(subs) <= PIPELINED_SUBSETS:
        return list(subs)
    bounds = []
    for devices in subs:
        time_s = ctx.batch / sum(ctx.pricing.speed(d, 1) for d in devices)
        bounds.append(ctx.metrics(time_s, dict.fromkeys(devices, time_s)))
    scores = objective.scores(bounds)
    order = sorted(range(len(subs)), key=scores.__getitem__)
    return [subs[i] for i in order[:PIPELINED_SUBSETS]]
