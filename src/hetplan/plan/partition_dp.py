"""Exact heterogeneous pipeline partitioning by dynamic programming.

Source: the min-max formulation of thesis 000 ("Methodology": balance stage times, the slowest
stage sets the pipeline's pace, and the formulation may use fewer GPUs than offered when
communication dominates). Definitions of stage time and memory: ``partition_core``.

Two backward passes over the first layer ``i`` of a suffix:

1. ``F[i, s]`` = least bottleneck of layers ``i..L`` when a stage starts at ``i`` on slot ``s``:
   ``min over (j, t) of max(stage(s, i, j, t), F[j, t])``, or the single last stage ``i..L``.
2. With the optimum ``T*`` fixed, the same recursion with stages of time ``<= T*`` minimises
   (number of stages, sum of stage times) lexicographically: the tie-breaker. Fewer stages
   first because a stage that does not lower the bottleneck only adds a transfer and a device;
   then the shortest trip of a micro-batch through the pipeline (lower fill/drain time).
   A second pass is needed because a suffix that is best for pass 1 need not be best for the
   tie-breaker once a slower earlier stage hides its bottleneck.

Cost: O(S^2 L^2) time when any slot may follow any earlier one (each stage picks its successor
among S), vectorised with numpy; O(S L^2) with ``slots="prefix"`` or an (S-1, L-1)
``cut_time``, where the successor is the next slot. Memory O(S L^2) for the stage table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hetplan.plan.partition_core import (
    CommModel,
    CutTime,
    Floats,
    Ints,
    Partition,
    Problem,
    SlotMode,
    make_problem,
)
from hetplan.plan.partition_fast import raise_infeasible

_NONE = np.iinfo(np.int64).max // 4
"""Stage count of an unreachable state."""


def stage_compute_table(p: Problem) -> Floats:
    """(S, L+1, L+1) compute seconds of stage ``i..j`` on slot ``s``; inf where impossible
    (empty, an infinite layer, or over the slot's memory)."""
    nl = p.num_layers
    i, j = np.meshgrid(np.arange(nl + 1), np.arange(nl + 1), indexing="ij")
    comp = p.time_prefix[:, None, :] - p.time_prefix[:, :, None]
    has_inf = (p.inf_prefix[:, None, :] - p.inf_prefix[:, :, None]) > 0
    mem = p.fixed_mem[:, None, None] + (p.mem_prefix[:, None, :] - p.mem_prefix[:, :, None])
    ok = (j > i)[None] & ~has_inf & (mem <= p.mem_cap[:, None, None])
    return np.where(ok, comp, np.inf)


def _hop_table(p: Problem) -> Floats:
    """(S, L-1, T) handoff seconds at cut c from s to its T candidate successors: every slot
    (T = S, inf where t <= s) or, when only consecutive slots are linked, s + 1 (T = 1)."""
    if not p.adjacent:
        return np.ascontiguousarray(p.cut.transpose(0, 2, 1))
    hops = np.full((p.num_slots, max(p.num_layers - 1, 0), 1), np.inf)
    idx = np.arange(p.num_slots - 1)
    hops[idx, :, 0] = p.cut[idx, idx + 1]
    return hops


def _successor_costs(p: Problem, table: Floats, hops: Floats, i: int) -> Floats:
    """(S, L-1-i, T) time of stage ``i..j`` on ``s`` handing off to candidate ``t``, for j in
    i+1..L-1."""
    comp = table[:, i, i + 1 : p.num_layers]
    return p.combine(comp[:, :, None], hops[:, i : p.num_layers - 1, :])


def _at_successors(p: Problem, values: NDArray[Any], i: int, fill: float) -> NDArray[Any]:
    """``values[j, t]`` for j in i+1..L-1 and each slot's candidate successors, shaped to
    broadcast with ``_successor_costs``."""
    rows = values[i + 1 : p.num_layers]
    if not p.adjacent:
        return rows[None, :, :]
    pad = np.full((rows.shape[0], 1), fill, dtype=rows.dtype)
    return np.hstack([rows[:, 1:], pad]).T[:, :, None]


def _min_bottleneck(p: Problem, table: Floats, hops: Floats) -> Floats:
    """Pass 1: F[i, s] (shape (L+1, S))."""
    nl = p.num_layers
    best = np.full((nl + 1, p.num_slots), np.inf)
    for i in range(nl - 1, -1, -1):
        row = p.combine(table[:, i, nl], 0.0)
        if i + 1 < nl:
            cost = _successor_costs(p, table, hops, i)
            nxt = _at_successors(p, best, i, np.inf)
            row = np.minimum(row, np.maximum(cost, nxt).min(axis=(1, 2)))
        best[i] = row
    return best


def _tie_break(
    p: Problem, table: Floats, hops: Floats, limit: float
) -> tuple[Ints, Floats, Ints, Ints]:
    """Pass 2 with stages <= limit: stage counts, total times, and the chosen next stage's
    start ``j`` and slot ``t`` (``j = L``, ``t = -1`` when the stage is the last)."""
    nl, s = p.num_layers, p.num_slots
    count = np.full((nl + 1, s), _NONE, dtype=np.int64)
    total = np.full((nl + 1, s), np.inf)
    next_j = np.full((nl + 1, s), nl, dtype=np.int64)
    next_t = np.full((nl + 1, s), -1, dtype=np.int64)
    width = hops.shape[2]
    rows = np.arange(s)
    for i in range(nl - 1, -1, -1):
        last = p.combine(table[:, i, nl], 0.0)
        n_opt = np.where(last <= limit, 1, _NONE)[:, None]
        t_opt = last[:, None]
        if i + 1 < nl:
            cost = _successor_costs(p, table, hops, i)
            n_after = _at_successors(p, count, i, _NONE)
            ok = (cost <= limit) & (n_after < _NONE)
            n_next = np.where(ok, 1 + n_after, _NONE).reshape(s, -1)
            t_next = (cost + _at_successors(p, total, i, np.inf)).reshape(s, -1)
            n_opt = np.hstack([n_next, n_opt])
            t_opt = np.hstack([t_next, t_opt])
        fewest = n_opt.min(axis=1)
        keyed = np.where(n_opt == fewest[:, None], t_opt, np.inf)
        pick = keyed.argmin(axis=1)
        count[i] = fewest
        total[i] = np.where(fewest < _NONE, keyed[rows, pick], np.inf)
        more = pick < n_opt.shape[1] - 1
        jj, tt = np.divmod(pick, width)
        next_j[i] = np.where(more, i + 1 + jj, nl)
        next_t[i] = np.where(more, tt if not p.adjacent else rows + 1, -1)
    return count, total, next_j, next_t


def partition_exact(
    layer_time: ArrayLike,
    cut_time: CutTime,
    *,
    layer_mem: ArrayLike | None = None,
    fixed_mem: ArrayLike | None = None,
    mem_cap: ArrayLike | None = None,
    comm: CommModel = "outgoing",
    slots: SlotMode = "subset",
) -> Partition:
    """Optimal min-max partition of ``L`` layers onto an order-preserving subset of ``S`` slots.

    Args:
        layer_time: (S, L) seconds of layer ``l`` (forward + backward, one micro-batch) on slot
            ``s``; ``inf`` = the layer cannot run there.
        cut_time: seconds to move the tensors of cut ``c`` (after layer ``c``) between slots:
            an (S-1, L-1) array for adjacent slots only (then the used slots are consecutive),
            an (S, S, L-1) array ``[s_from, s_to, c]`` (entries with ``s_to <= s_from``
            ignored), or a callable ``(s_from, s_to) -> L-1 seconds``; ``inf`` = no link.
        layer_mem: (L,) or (S, L) bytes each layer needs on a slot.
        fixed_mem: (S,) bytes a slot needs whatever it runs (runtime, buffers); default 0.
        mem_cap: (S,) bytes available on each slot; default unlimited.
        comm: ``"outgoing"`` (stage = compute + handoff) or ``"overlap"`` (max of the two).
        slots: ``"subset"``: any order-preserving subset of slots may be used;
            ``"prefix"``: slots ``0..k-1`` for some ``k``.

    Returns the optimum with ties broken by fewer stages, then lower total time.
    Raises PartitionInfeasible (with slot, layer and bytes) when nothing fits, and InputError
    on malformed input.
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
    table = stage_compute_table(p)
    hops = _hop_table(p)
    starts = list(p.start_slots())
    best = float(_min_bottleneck(p, table, hops)[0, starts].min())
    if not np.isfinite(best):
        raise_infeasible(p)
    count, total, next_j, next_t = _tie_break(p, table, hops, best)
    s = min(starts, key=lambda a: (int(count[0, a]), float(total[0, a])))
    i, stages, used = 0, [], []
    while i < p.num_layers:
        stages.append((i, int(next_j[i, s])))
        used.append(s)
        i, s = int(next_j[i, s]), int(next_t[i, s])
    return p.evaluate(stages, used, exact=True, method="dp")
