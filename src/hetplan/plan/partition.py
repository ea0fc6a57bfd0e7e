"""Pipeline partitioners: the public entry points.

- ``partition_exact``: optimal heterogeneous min-max partition by dynamic programming
  (``partition_dp``), ties broken by fewer stages then lower total time.
- ``partition_fast``: the same problem by search on the bottleneck with an exact feasibility
  check (``partition_fast``, ``partition_check``); optimal when it says ``exact``, else within
  ``rtol``.
- ``equal_split``: the "equal pipeline" baseline of thesis 000 (same number of layers per stage).
- ``balanced_split_by_cost``: homogeneous min-max split of a cost list into S stages.

Definitions (stage time, memory, slots) are in ``partition_core``'s docstring.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import ArrayLike

from hetplan.errors import InputError
from hetplan.plan.partition_core import (
    CommModel,
    CutTime,
    CutTimeFn,
    Partition,
    PartitionInfeasible,
    SlotMode,
)
from hetplan.plan.partition_dp import partition_exact
from hetplan.plan.partition_fast import partition_fast

__all__ = [
    "CommModel",
    "CutTime",
    "CutTimeFn",
    "Partition",
    "PartitionInfeasible",
    "SlotMode",
    "balanced_split_by_cost",
    "equal_split",
    "partition_exact",
    "partition_fast",
]


def _check_counts(num_layers: int, num_stages: int) -> None:
    if not 1 <= num_stages <= num_layers:
        raise InputError(
            f"stages ({num_stages}) must be between 1 and the number of layers ({num_layers})"
        )


def equal_split(num_layers: int, num_stages: int) -> list[tuple[int, int]]:
    """``num_stages`` half-open ranges with equal layer counts; the first ``L % S`` stages get
    one layer more (the equal-pipeline baseline)."""
    _check_counts(num_layers, num_stages)
    size, extra = divmod(num_layers, num_stages)
    bounds = np.cumsum([0] + [size + (k < extra) for k in range(num_stages)])
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def balanced_split_by_cost(costs: ArrayLike, num_stages: int) -> list[tuple[int, int]]:
    """Exactly ``num_stages`` non-empty contiguous ranges minimising the largest range cost.

    Homogeneous devices, no communication: the linear partition problem, solved exactly by
    dynamic programming over prefix sums in O(S L^2). Among optimal splits the earliest stages
    are kept as long as possible (the leftmost-argmin choice at each cut).
    """
    c = np.asarray(costs, dtype=np.float64).reshape(-1)
    if c.size and (np.isnan(c).any() or (c < 0).any()):
        raise InputError("costs: expected numbers >= 0")
    nl = c.size
    _check_counts(nl, num_stages)
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    span = prefix[None, :] - prefix[:, None]  # span[i, j] = cost of layers i..j
    span = np.where(np.triu(np.ones((nl + 1, nl + 1), dtype=bool), 1), span, np.inf)
    best = span[0].copy()  # best[j]: min max cost of layers 0..j in k stages
    cuts = np.zeros((num_stages, nl + 1), dtype=np.int64)
    for k in range(1, num_stages):
        cand = np.maximum(best[:, None], span)  # [i, j]: last stage i..j after k stages
        cand[:k] = np.inf  # the first k stages need k layers
        cuts[k] = cand[::-1].argmin(axis=0)
        cuts[k] = nl - cuts[k]  # last minimiser = earliest stages longest
        best = cand.min(axis=0)
    bounds = [nl]
    for k in range(num_stages - 1, 0, -1):
        bounds.append(int(cuts[k, bounds[-1]]))
    bounds.append(0)
    bounds.reverse()
    return [(bounds[k], bounds[k + 1]) for k in range(num_stages)]
