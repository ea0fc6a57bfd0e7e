"""Fast heterogeneous pipeline partitioning: search on the bottleneck with a feasibility check.

Source: slides 002 ("it is difficult to directly find the optimal partition, but we can quickly
verify if a feasible partition exists given a partition limitation": binary search on the
limit). Stage time and memory are defined in ``partition_core``; the check, which is exact
with communication terms, memory limits and slot skipping, is in ``partition_check``.

The search keeps a lower bound ``lo`` on the optimum and the best partition found (its
bottleneck is the upper bound ``hi``). Each round checks ``lo``, a few limits spread between the
bounds and one just below ``hi``, all in one pass over the slots. The least passing limit
yields a partition whose actual bottleneck becomes ``hi``; the greatest failing limit yields
its next event, the new ``lo`` (a candidate value, checked first in the next round). Rounds use
the check without its rounding corrections (half the work); when the bounds meet (or are
within ``rtol``), one rigorous check just below ``hi`` proves it optimal (``exact=True``).
Otherwise the answer is within ``(1 + rtol)`` of the optimum (``exact=False``).

Cost: a handful of rounds (4-7 on the benchmark instances), each O(K (S^2 L + S L log L)) for
K = ``LIMITS_PER_ROUND`` limits; O(K S L log L) when only consecutive slots are linked.

Tie-breaking is greedy (each stage as long as possible, which tends to use few stages), not the
exact (stages, total time) order of ``partition_exact``.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
from numpy.typing import ArrayLike

from hetplan.plan.partition_check import Check, Prep, check, next_event, prepare, successor
from hetplan.plan.partition_core import (
    CommModel,
    CutTime,
    Floats,
    Partition,
    PartitionInfeasible,
    Problem,
    SlotMode,
    make_problem,
)

LIMITS_PER_ROUND = 8
"""Limits checked together per round (they share the Python loop over slots); tuned on
``benchmarks/bench_partition.py``."""
_HUGE = float(np.finfo(np.float64).max)
"""The 'no limit' limit: finite so that an infinite handoff never passes."""


def partition_fast(
    layer_time: ArrayLike,
    cut_time: CutTime,
    *,
    layer_mem: ArrayLike | None = None,
    fixed_mem: ArrayLike | None = None,
    mem_cap: ArrayLike | None = None,
    comm: CommModel = "outgoing",
    slots: SlotMode = "subset",
    rtol: float = 1e-9,
    max_rounds: int = 64,
) -> Partition:
    """Min-max partition by search on the bottleneck; same arguments as ``partition_exact``.

    The bottleneck is optimal when the result's ``exact`` is True, else at most
    ``(1 + rtol)`` times the optimum; after ``max_rounds`` rounds the best partition found is
    returned (``exact=False``).
    """
    p = make_problem(
        layer_time,
        cut_time,
        layer_mem=layer_mem,
        fixed_mem=fixed_mem,
        mem_cap=mem_cap,
        comm=comm,
        slots=slots,
    )
    prep = prepare(p)
    lo = _lower_bound(p)
    if not np.isfinite(lo):
        raise_infeasible(p, prep)
    # first round: geometric from the lower bound to 3x it (or one stage on one slot, if less)
    # and no limit at all (which tells whether anything fits)
    hi = float(min(p.compute(s, 0, p.num_layers) for s in p.start_slots()))
    hi = min(hi, 3 * lo) if lo < hi < _HUGE else 2 * lo + 1.0
    limits = np.append(_spread(lo, hi, LIMITS_PER_ROUND - 1), _HUGE)
    best: Partition | None = None
    for _ in range(max_rounds):
        chk = check(p, prep, limits, exact=False)
        passed = chk.feasible(p)
        if best is None and not passed[-1]:
            raise_infeasible(p, prep)
        if passed.any():
            found = build(p, prep, chk, int(np.argmax(passed)))
            best = found if best is None or found.bottleneck < best.bottleneck else best
        assert best is not None
        if not passed[0]:
            lo = max(lo, next_event(p, prep, chk, len(passed) - 1 - int(np.argmin(passed[::-1]))))
        hi = best.bottleneck
        if lo >= hi or hi - lo <= rtol * hi:
            break
        # lo is (within the slack) a candidate; just below hi the check fails if hi is optimal
        below = max(hi - 2 * prep.slack, lo)
        limits = np.append(_spread(lo, hi, LIMITS_PER_ROUND - 1), below)
    assert best is not None
    return _prove(p, prep, best)


def _prove(p: Problem, prep: Prep, best: Partition) -> Partition:
    """``best`` marked exact when no partition has a smaller bottleneck (rigorous check), else
    the better partition that the check finds."""
    if best.bottleneck <= 0.0:
        return Partition(**{**best.__dict__, "exact": True})
    chk = check(p, prep, np.array([np.nextafter(best.bottleneck, 0.0)]), exact=True)
    if not chk.feasible(p)[0]:
        return Partition(**{**best.__dict__, "exact": True})
    found = build(p, prep, chk, 0)
    return found if found.bottleneck < best.bottleneck else best


def _lower_bound(p: Problem) -> float:
    """Every layer runs on some slot, and at most S stages share the work."""
    single = np.diff(p.time_prefix, axis=1)
    single = np.where(np.diff(p.inf_prefix, axis=1) > 0, np.inf, single).min(axis=0)
    return float(max(single.max(), single.sum() / p.num_slots))


def _spread(lo: float, hi: float, n: int) -> Floats:
    """``lo`` and ``n - 1`` limits spread in (lo, hi), ascending; geometric when far apart."""
    frac = np.arange(n) / n
    if lo > 0 and hi / lo > 4:
        return np.asarray(lo * (hi / lo) ** frac)
    return np.asarray(lo + (hi - lo) * frac)


def build(p: Problem, prep: Prep, chk: Check, k: int) -> Partition:
    """A partition passing check ``k``: each stage as long as possible."""
    ends = np.arange(p.num_layers + 1)
    first = chk.first[k]

    def longest(s: int, i: int) -> int:
        return int(ends[(first[s] <= i) & (ends > i)].max())

    starts = [s for s in p.start_slots() if chk.ok[k, s, 0]]
    s = max(starts, key=lambda a: (longest(a, 0), -a))
    i, stages, used = 0, [], []
    while True:
        j = longest(s, i)
        stages.append((i, j))
        used.append(s)
        if j == p.num_layers:
            break
        i, s = j, successor(p, prep, chk, k, s, j)
    return p.evaluate(stages, used, exact=False, method="search")


def raise_infeasible(
    p: Problem, prep: Prep | None = None, chk: Check | None = None, k: int = 0
) -> NoReturn:
    """Raise PartitionInfeasible naming the first obstacle, with its numbers."""
    for layer in range(p.num_layers):
        runs = [p.compute(s, layer, layer + 1) < np.inf for s in range(p.num_slots)]
        if not any(runs):
            raise PartitionInfeasible(f"layer {layer} has infinite time on every slot", layer=layer)
        need = [p.mem(s, layer, layer + 1) for s in range(p.num_slots)]
        room = [p.mem_cap[s] - need[s] if runs[s] else -np.inf for s in range(p.num_slots)]
        s = int(np.argmax(room))
        if room[s] < 0:
            raise PartitionInfeasible(
                f"layer {layer} fits on no slot: on slot {s} (the roomiest) it needs "
                f"{need[s]:.6g} bytes > capacity {p.mem_cap[s]:.6g}",
                slot=s,
                layer=layer,
                needed_bytes=need[s],
                capacity_bytes=float(p.mem_cap[s]),
            )
    prep = prep if prep is not None else prepare(p)
    chk = chk if chk is not None else check(p, prep, np.array([_HUGE]))
    ok, nl = chk.ok[k], p.num_layers
    # the first stage 0..j on slot s that could hand off to a placeable rest: least overflow
    options = [
        (p.mem(s, 0, j) - float(p.mem_cap[s]), s, j)
        for s in p.start_slots()
        for j in range(1, nl + 1)
        if j == nl
        or any(ok[t, j] and p.cut[s, t, j - 1] < np.inf for t in range(s + 1, p.num_slots))
    ]
    if not options:
        raise PartitionInfeasible("no order of the slots connects the first layer to the last")
    _, s, j = min(options)
    raise PartitionInfeasible(
        f"layers 0..{j - 1} must share slot {s} (later slots cannot take them over), which "
        f"needs {p.mem(s, 0, j):.6g} bytes > capacity {p.mem_cap[s]:.6g}",
        slot=s,
        layer=j - 1,
        needed_bytes=p.mem(s, 0, j),
        capacity_bytes=float(p.mem_cap[s]),
    )
