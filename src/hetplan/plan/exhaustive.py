"""Reference search: every candidate of the heuristic's space, simulated.

The heuristic (``plan.search``) screens candidates with closed forms and simulates a shortlist;
this reference generates the same kinds of candidates on every subset (every orbit of the
device-level space, or every identity-level subset), refines every pipelined one over all its
micro-batch counts, and simulates all of them. Its best plan is the optimum of the space (by
predicted metrics), which the exactness benchmark and tests compare the heuristic with. Small
clusters only: the cost is thousands of simulations.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Literal

from hetplan.cluster.spec import Cluster
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import ModelGraph
from hetplan.plan.candidates import (
    MAX_PIPELINE_STAGES,
    dp_candidate,
    hybrid_candidates,
    pipeline_candidates,
    ps_candidate,
    refine,
)
from hetplan.plan.classes import orbits, symmetry
from hetplan.plan.context import Candidate, Context
from hetplan.plan.options import RUNNABLE, SearchOptions
from hetplan.plan.search import Ranking, baselines, make_context, rank, simulate, unique
from hetplan.plan.sharded import fsdp_candidate, zero1_candidate
from hetplan.plan.tp import TP_DEGREES, has_tp_units, splits_at, tp_groups
from hetplan.planspec.plan import ModelRef
from hetplan.planspec.strategies import spec_of

Subsets = Literal["orbits", "identity"]
MAX_REFERENCE_DEVICES = 12
"""Largest cluster the identity-level enumeration accepts (2^12 subsets)."""


def exhaustive_search(
    model: ModelRef,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    opts: SearchOptions,
    *,
    subsets: Subsets = "orbits",
) -> Ranking:
    """Simulate every candidate of the search space; rank them as ``search`` does."""
    ctx = make_context(model, graph, cluster, compute, opts)
    families = tuple(f for f in opts.families if f in RUNNABLE or not opts.runnable_only)
    if graph.split_error is not None:
        families = tuple(f for f in families if spec_of(f).shape == "replicas")
    pool: list[Candidate] = []
    for devices in _subsets(cluster, subsets):
        n = len(devices)
        if (opts.limits.min_devices or 1) <= n <= min(ctx.batch, opts.limits.max_devices or n):
            pool.extend(candidates_on(ctx, cluster, devices, families))
    failures: dict[str, str] = {}
    base = baselines(ctx, cluster, failures)
    todo = unique(list(base.values()) + pool)
    rejected: Counter[str] = Counter()
    ranking = rank(simulate(ctx, todo, opts, rejected, failures, None), opts, rejected)
    ranking.screened = ranking.simulated = len(todo)
    return ranking


def candidates_on(
    ctx: Context, cluster: Cluster, devices: Sequence[str], families: Sequence[str]
) -> list[Candidate]:
    """Every candidate the heuristic could build on ``devices``, at every micro-batch count."""
    out: list[Candidate] = []
    sharded = fsdp_candidate(ctx, devices) if "fsdp" in families else None
    if sharded is not None:  # it may fit where data parallelism does not
        out.append(sharded)
    dp = dp_candidate(ctx, devices)
    if dp is None:
        return out
    if "dp" in families:
        out.append(dp)
    zero1 = zero1_candidate(ctx, dp) if "fsdp" in families else None
    if zero1 is not None:
        out.append(zero1)
    if "ps" in families and len(devices) > 1:
        out.append(ps_candidate(ctx, devices, dp))
    piped = [f for f in families if spec_of(f).shape == "pipeline"]
    out += _pipelined(ctx, devices, piped, "hybrid" in families, orders=2)
    if has_tp_units(ctx.graph):
        for tp in (t for t in TP_DEGREES if splits_at(ctx.graph, t)):
            groups = tp_groups(cluster, devices, tp)
            if groups is None or len(devices) == 1:
                continue
            tp_dp = dp_candidate(ctx, groups)
            if tp_dp is not None and "dp" in families:
                out.append(tp_dp)
            tp_piped = [f for f in piped if spec_of(f).tensor_parallel]
            out += _pipelined(ctx, groups, tp_piped, "hybrid" in families, orders=1)
    return out


def _pipelined(
    ctx: Context, slots: Sequence[str], piped: Sequence[str], hybrid: bool, *, orders: int
) -> list[Candidate]:
    base: list[Candidate] = []
    if piped and 1 < len(slots) <= MAX_PIPELINE_STAGES:
        base += pipeline_candidates(ctx, slots, piped, orders=orders)  # type: ignore[arg-type]
    if hybrid and len(slots) > 3:
        base += hybrid_candidates(ctx, slots)
    return base + [r for c in base for r in refine(ctx, c)]


def _subsets(cluster: Cluster, how: Subsets) -> Iterator[tuple[str, ...]]:
    if how == "orbits":
        sym = symmetry(cluster)
        for sel in orbits(sym):
            if sym.size(sel):
                yield sym.devices(sel)
        return
    ids = [d.id for d in cluster.devices]
    if len(ids) > MAX_REFERENCE_DEVICES:
        raise ValueError(
            f"identity-level reference search: {len(ids)} devices, at most "
            f"{MAX_REFERENCE_DEVICES} (2^n subsets)"
        )
    for k in range(len(ids), 0, -1):
        yield from itertools.combinations(ids, k)
