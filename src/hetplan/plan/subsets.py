"""Which device subsets the screening prices, chosen by counts over the cluster's symmetry.

Three regimes, by the size of the space (``plan.classes``):

1. ``exact``: every orbit of the device-level space (every per-node count of every class, up to
   swapping interchangeable nodes), when there are at most MAX_EXHAUSTIVE_SUBSETS;
2. ``nodes``: every choice of a number of whole nodes per class, when at most MAX_NODE_SUBSETS;
3. ``descent``: coordinate descent over whole nodes per class on the data-parallel estimate
   (each class swept over all its node counts with the others fixed, until no sweep improves),
   from all devices and from each class alone; the subsets it visits form the space.

Data parallel is priced on every subset of the space from class counts (``plan.replicas``), so
a subset of 10,000 devices costs what one of 10 does; device ids are placed only for the
candidates the search keeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hetplan.cluster.spec import Cluster
from hetplan.cost.comm import allreduce_time
from hetplan.cost.comm_collectives import grouped_allreduce_time
from hetplan.plan.candidates import dp_from_estimate
from hetplan.plan.classes import (
    Selection,
    Symmetry,
    class_devices,
    node_level,
    node_level_count,
    node_levels,
    orbit_count,
    orbits,
    symmetry,
)
from hetplan.plan.context import Candidate, Context
from hetplan.plan.objective import Objective
from hetplan.plan.options import Budget, Progress, SearchOptions
from hetplan.plan.replicas import dp_estimate

MAX_EXHAUSTIVE_SUBSETS = 256
"""Enumerate every orbit of the device-level space up to this many subsets."""
MAX_NODE_SUBSETS = 4096
"""Enumerate every whole-node count vector up to this many subsets; descend above."""
DESCENT_ROUNDS = 4
"""Sweeps over all classes per start of the coordinate descent (it stops earlier when a
sweep changes nothing; measured: 2-3 suffice on the generated clusters)."""


@dataclass
class Space:
    """The subsets to screen and their data-parallel candidates (None: no memory fit)."""

    sym: Symmetry
    method: str
    selections: list[Selection] = field(default_factory=list)
    dp: list[Candidate | None] = field(default_factory=list)
    _sizes: dict[int, tuple[Selection, int]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def exhaustive(self) -> bool:
        """Every subset of the device-level space (up to symmetry) is here."""
        return self.method == "exact"

    def devices(self, sel: Selection) -> tuple[str, ...]:
        return self.sym.devices(sel)

    def size(self, sel: Selection) -> int:
        """``sym.size(sel)``, kept: the screening's families ask it of every selection, a sum
        over the nodes each time (1,250 of them at 10,000 devices). Kept by identity with the
        selection itself, so that an id is not reused while it is."""
        hit = self._sizes.get(id(sel))
        if hit is None or hit[0] is not sel:
            hit = self._sizes[id(sel)] = (sel, self.sym.size(sel))
        return hit[1]


def subset_space(
    ctx: Context,
    cluster: Cluster,
    opts: SearchOptions,
    progress: Progress | None,
    budget: Budget | None = None,
) -> Space:
    """The subsets worth screening for ``opts`` (at most ``max_devices`` and ``batch``
    devices), each with its data-parallel candidate, largest first."""
    sym = symmetry(cluster)
    priced: dict[Selection, Candidate | None] = {}  # the descent's, not priced again
    cap = min(opts.limits.max_devices or ctx.batch, ctx.batch)
    if orbit_count(sym) <= MAX_EXHAUSTIVE_SUBSETS:
        space = Space(sym=sym, method="exact")
        sels: Sequence[Selection] = list(orbits(sym))
    elif node_level_count(sym) <= MAX_NODE_SUBSETS:
        space = Space(sym=sym, method="nodes")
        sels = list(node_levels(sym))
    else:
        space = Space(sym=sym, method="descent")
        priced = _descend(ctx, sym, opts.objective, cap, progress, budget or Budget())
        sels = list(priced)
    floor = max(1, opts.limits.min_devices or 1)
    if floor > cap:
        return space
    if space.method == "descent" and not any(space.size(s) >= floor for s in sels):
        sels = [*sels, _full(sym)]  # e.g. --all-devices: the descent's subsets are smaller
    kept = sorted((s for s in sels if floor <= space.size(s) <= cap), key=space.size, reverse=True)
    best = math.inf
    for i, sel in enumerate(kept):
        if budget is not None and space.selections and budget.stop("screening subsets"):
            break
        space.selections.append(sel)
        cand = priced[sel] if sel in priced else dp_of(ctx, sym, sel)
        space.dp.append(cand)
        if cand is not None:
            best = min(best, cand.estimate.time_s)
        if progress is not None and (i % 64 == 0 or i + 1 == len(kept)):
            shown = "" if math.isinf(best) else f"~{best:.4g} s per iteration (estimate)"
            progress("screening subsets", i + 1, len(kept), best=shown)
    return space


def _full(sym: Symmetry) -> Selection:
    """Every device of the cluster."""
    return node_level(sym, [len(sym.shapes[c.shape].nodes) for c in sym.classes])


def dp_of(ctx: Context, sym: Symmetry, sel: Selection, *, equal: bool = False) -> Candidate | None:
    """Data parallel on ``sel`` priced from its class counts and node ring."""
    counts = sym.counts(sel)
    used = [c for c, n in enumerate(counts) if n]
    slots = [sym.classes[c].rep for c in used]
    cluster = ctx.pricing.cluster
    allreduce: Callable[[float], float]
    if cluster.pair_links or cluster.collective_capped or cluster.has_cpu:
        # Overrides break the node-level ring, the classes keep the links uncapped, and gloo
        # (CPU ranks) rings where NCCL may take a tree: price the concrete ring.
        ring_ids = sym.devices(sel)
        allreduce = lambda nbytes: allreduce_time(nbytes, ring_ids, cluster)  # noqa: E731
    else:
        ring = sym.ring(sel)
        overhead = cluster.collective_overhead_s
        allreduce = lambda nbytes: grouped_allreduce_time(nbytes, ring, overhead)  # noqa: E731
    est = dp_estimate(ctx, slots, [counts[c] for c in used], allreduce, equal=equal)
    if est is None:
        return None

    def place() -> tuple[list[list[str]], tuple[str, ...]]:
        per_class = class_devices(sym, sel)
        return [per_class[c] for c in used], sym.devices(sel)

    return dp_from_estimate(ctx, est, place, replicas=sum(counts), tp=1, equal=equal)


def _descend(
    ctx: Context,
    sym: Symmetry,
    objective: Objective,
    cap: int,
    progress: Progress | None,
    budget: Budget,
) -> dict[Selection, Candidate | None]:
    """Coordinate descent over whole nodes per class on the data-parallel estimate."""
    limits = [len(sym.shapes[c.shape].nodes) for c in sym.classes]
    sizes = [c.per_node for c in sym.classes]
    seen: dict[tuple[int, ...], Candidate | None] = {}

    def evaluate(x: tuple[int, ...]) -> Candidate | None:
        if x not in seen and seen and budget.stop("searching subsets"):
            return None  # out of time: the sweep sees nothing better and ends
        if x not in seen:
            size = sum(n * k for n, k in zip(x, sizes, strict=True))
            seen[x] = dp_of(ctx, sym, node_level(sym, x)) if 1 <= size <= cap else None
            if progress is not None and len(seen) % 64 == 0:
                progress("searching subsets", len(seen), 0)  # total unknown
        return seen[x]

    starts = [tuple(limits)]
    starts += [tuple(n if i == c else 0 for i, n in enumerate(limits)) for c in range(len(limits))]
    for start in starts:
        if seen and budget.stop("searching subsets"):
            break
        _sweep(start, limits, evaluate, objective)
    return {node_level(sym, x): cand for x, cand in seen.items() if cand is not None}


def _sweep(
    start: tuple[int, ...],
    limits: Sequence[int],
    evaluate: Callable[[tuple[int, ...]], Candidate | None],
    objective: Objective,
) -> tuple[int, ...]:
    """From ``start``, move one class at a time to its best node count (all counts tried)
    until a round changes nothing; only a strictly better score moves (no cycling)."""
    x = start
    for _ in range(DESCENT_ROUNDS):
        moved = False
        for c in range(len(limits)):
            line = [(*x[:c], v, *x[c + 1 :]) for v in range(limits[c] + 1)]
            ok = [(y, cand) for y in line if (cand := evaluate(y)) is not None]
            if not ok:
                continue
            scores = objective.scores([cand.estimate for _, cand in ok])
            i = min(range(len(ok)), key=scores.__getitem__)
            current = next((scores[j] for j, (y, _) in enumerate(ok) if y == x), math.inf)
            if scores[i] < current:
                x, moved = ok[i][0], True
        if not moved:
            break
    return x
