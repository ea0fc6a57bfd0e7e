"""Exact feasibility check of a bottleneck limit, for several limits at once.

Question: can the layers be split into stages of time ``<= limit`` that fit in memory (stage
time and memory as in ``partition_core``)? The classic greedy (fill each slot in order with as
many layers as fit, slides 002) is exact only for a fixed slot sequence with costs monotone in
the stage's length: a handoff cost that depends on the cut, or the choice of which slots to
skip, breaks it (the longest stage may end at a cut that is expensive to send). This check runs
backwards and is exact for both comm models, with memory limits and with slot skipping:

- for a stage that ends at ``j`` on slot ``s`` and hands off to a given slot, compute and memory
  only grow as its start ``i`` moves earlier, so its feasible starts are an interval
  ``[first(s, j), j)``, found by binary search on prefix sums;
- going from the last slot to the first, ``ok[s, i]`` (layers ``i..L`` can be covered starting
  with a stage at ``i`` on ``s``) is the union of those intervals, each using the cheapest
  handoff at ``j`` to a later slot ``t`` with ``ok[t, j]``.

Cost O(S^2 L + S L log L) per limit; the limits of one call share the Python loop over slots.
A failed check also gives the next *event*: the least limit above it at which any ``ok`` entry
changes, which is a lower bound on the optimum and itself a candidate value. An inexact mode
(plain ``searchsorted``, no rounding corrections) is twice as fast and misjudges only stages
within ``Prep.slack`` of a limit; its events are lowered by that slack to stay lower bounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hetplan.plan.partition_core import Floats, Ints, Problem

Bools = NDArray[np.bool_]


@dataclass(frozen=True)
class Prep:
    """What does not depend on the limit."""

    adjacent: bool
    """Only hops s -> s+1 exist (prefix mode or (S-1, L-1) cut_time): skip the search on t."""
    struct_first: Ints
    """(S, L+1): earliest start of a stage ending at j on s allowed by memory and infinite
    layers (j = none)."""
    slack: float
    """Seconds by which the inexact check may misjudge a stage time: a few ulps of the largest
    prefix sum plus handoff (the two sides of its comparison are rounded differently)."""


@dataclass(frozen=True)
class Check:
    """Check results; arrays indexed ``[limit, slot, layer]``."""

    limits: Floats
    exact: bool
    """False: judged by the inexact comparison (see ``check``)."""
    ok: Bools
    """Layers i..L coverable starting with a stage at i on slot s."""
    first: Ints
    """Earliest start of a stage ending at j on s (j = none)."""
    first_time: Ints
    """Same, by the time limit alone."""
    send: Floats
    """Cheapest handoff at end j from s to a slot that can go on (0 at j = L, inf = none)."""

    def feasible(self, p: Problem) -> Bools:
        """(K,) whether each limit admits a partition."""
        return np.asarray(self.ok[:, list(p.start_slots()), 0].any(axis=1), dtype=np.bool_)


def prepare(p: Problem) -> Prep:
    nl, n = p.num_layers, p.num_slots
    j = np.arange(1, nl + 1)
    struct = np.zeros((n, nl + 1), dtype=np.int64)
    for s in range(n):
        if np.isfinite(p.mem_cap[s]):
            mp = p.mem_prefix[s]

            def fits(i: Ints, s: int = s, mp: Floats = mp) -> Bools:
                within: Bools = p.fixed_mem[s] + (mp[j] - mp[i]) <= p.mem_cap[s]
                return within

            by_mem = _earliest(mp, mp[j] + p.fixed_mem[s] - p.mem_cap[s], j, fits)
            struct[s, 1:] = by_mem
    if p.inf_prefix[:, -1].any():
        for r in np.flatnonzero(p.inf_prefix[:, -1]):
            by_inf = np.searchsorted(p.inf_prefix[r], p.inf_prefix[r, j], side="left")
            struct[r, 1:] = np.maximum(struct[r, 1:], by_inf)
    struct[:, 1:] = np.minimum(struct[:, 1:], j)
    scale = float(p.time_prefix.max()) + p.cut_max
    slack = 16 * float(np.spacing(max(scale, np.finfo(np.float64).tiny)))
    return Prep(adjacent=p.adjacent, struct_first=struct, slack=slack)


def _earliest(prefix: Floats, targets: Floats, ends: Ints, passes: Callable[[Ints], Bools]) -> Ints:
    """Least ``i < ends`` with ``passes(i)`` (``ends`` when none), for a predicate monotone in
    ``i``. ``searchsorted`` on the prefix sums gives the answer up to rounding; the steps below
    make it exact for the predicate as written, so that checks and reported stage times agree
    bit for bit."""
    i = np.minimum(np.searchsorted(prefix, targets, side="left"), ends)
    while True:
        both = passes(np.stack([np.maximum(i - 1, 0), np.minimum(i, ends - 1)]))
        move = (both[0] & (i > 0)).astype(np.int64) - (~both[1] & (i < ends))
        if not move.any():
            return i.astype(np.int64)
        i -= move


def check(p: Problem, prep: Prep, limits: Floats, *, exact: bool = True) -> Check:
    """Run the check for each limit of ``limits`` (shape (K,)).

    ``exact=False`` skips the rounding corrections of the binary searches (about half the
    work): a stage within a few ulps of a limit may then be judged either way. The search uses
    it to narrow the bounds and an exact check to prove its answer.
    """
    nl, n, k = p.num_layers, p.num_slots, len(limits)
    ends = np.arange(nl + 1)
    j = ends[1:]
    lim = limits[:, None]
    barred = np.full((k, n, nl + 1), np.inf)  # 0 where ok, inf elsewhere: masks handoffs
    first = np.broadcast_to(ends, (k, n, nl + 1)).copy()
    first_time = first.copy()
    send = np.full((k, n, nl + 1), np.inf)
    send[:, :, nl] = 0.0
    outgoing = p.comm == "outgoing"
    hops = np.empty((k, 1 if prep.adjacent else n, max(nl - 1, 0)))
    with np.errstate(invalid="ignore"):  # inf - inf = nan sorts last below: no start
        for s in range(n - 1, -1, -1):
            if nl > 1 and s + 1 < n:
                stop = s + 2 if prep.adjacent else n
                buf = hops[:, : stop - s - 1]
                np.add(p.cut[s, s + 1 : stop], barred[:, s + 1 : stop, 1:nl], out=buf)
                buf.min(axis=1, out=send[:, s, 1:nl])
            tp, x = p.time_prefix[s], send[:, s, 1:]
            tpj = tp[1:]

            def passes(i: Ints, tp: Floats = tp, tpj: Floats = tpj, x: Floats = x) -> Bools:
                if outgoing:
                    within: Bools = (tpj - tp[i]) + x <= lim
                else:
                    within = np.maximum(tpj - tp[i], x) <= lim
                return within

            target = tpj - (lim - x) if outgoing else np.where(x <= lim, tpj - lim, np.inf)
            if exact:
                ft = first_time[:, s, 1:] = _earliest(tp, target, j, passes)
            else:
                ft = first_time[:, s, 1:] = np.minimum(np.searchsorted(tp, target), j)
            fs = first[:, s, 1:] = np.maximum(ft, prep.struct_first[s, 1:])
            reach = np.minimum.accumulate(fs[:, ::-1], axis=1)[:, ::-1]  # min over ends > i
            np.copyto(barred[:, s, :nl], 0.0, where=reach <= ends[:nl])
    return Check(limits, exact, barred == 0.0, first, first_time, send)


def successor(p: Problem, prep: Prep, chk: Check, k: int, s: int, j: int) -> int:
    """The slot after s that takes over at layer j with the cheapest handoff (check k)."""
    stop = s + 2 if prep.adjacent else p.num_slots
    hops = np.where(chk.ok[k, s + 1 : stop, j], p.cut[s, s + 1 : stop, j - 1], np.inf)
    return s + 1 + int(hops.argmin())


def next_event(p: Problem, prep: Prep, chk: Check, k: int) -> float:
    """A lower bound on the optimum from check ``k``, which failed.

    Exact check: the least limit above ``chk.limits[k]`` at which some ``ok`` entry changes.
    By induction from the last slot: while no later slot changes, the handoffs stay the same,
    and slot s gains a start only when the latest start that fails on time (``first_time - 1``)
    passes; that start is the cheapest that could be gained at that end. So the optimum is at
    least this event, which is itself a stage time (a candidate).

    Inexact check: it is the exact check of stage times perturbed by at most ``prep.slack``, so
    the same argument bounds the optimum by the least such cost (unfiltered) minus twice the
    slack, and by the failed limit minus the slack.
    """
    j = np.arange(1, p.num_layers + 1)
    i = chk.first_time[k, :, 1:] - 1
    x = chk.send[k, :, 1:]
    usable = (i >= prep.struct_first[:, 1:]) & (i >= 0) & np.isfinite(x)
    rows = np.arange(p.num_slots)[:, None]
    comp = p.time_prefix[rows, j[None]] - p.time_prefix[rows, np.maximum(i, 0)]
    cost = p.combine(comp, x)
    limit = float(chk.limits[k])
    if chk.exact:
        cost = cost[usable & (cost > limit)]
        return float(cost.min()) if cost.size else float("inf")
    least = float(cost[usable].min()) if usable.any() else float("inf")
    return max(least - 2 * prep.slack, limit - prep.slack)
