"""Shared data of the heterogeneous pipeline partitioners: the problem, the result, the error.

The problem (min-max pipeline partitioning, thesis 000 "Methodology"; binary search with a
feasibility check, slides 002): ``L`` layers in model order, ``S`` stage *slots* (devices or
device groups) in pipeline order. Split the layers into contiguous stages placed on an
order-preserving subset of the slots so that the slowest stage is as fast as possible.

Definitions used by every partitioner here (kept in one place so that they agree):

- compute ``C(s, i, j)`` = sum of ``layer_time[s][i:j]`` (forward + backward per micro-batch);
- handoff ``X(s, t, j)`` = ``cut_time`` of the cut after layer ``j - 1`` from slot ``s`` to the
  next used slot ``t`` (activation forward + gradient backward, priced by the caller);
- stage time, ``comm="outgoing"`` (default, the thesis's model: a device does not overlap its
  transfers with compute, and each link is charged once, to its sender):
  ``C(s, i, j) + X(s, t, j)``; the last stage has no handoff;
  ``comm="overlap"`` (transfers run on their own engines, each link is a pipeline stage of its
  own): ``max(C(s, i, j), X(s, t, j))``;
- memory of a stage ``fixed_mem[s] + sum(layer_mem[s][i:j])`` must be ``<= mem_cap[s]``;
- bottleneck = max stage time; the steady-state time per micro-batch of the pipeline.

Sums are taken as differences of prefix sums, identically in every partitioner, so that their
answers compare exactly.

Not offered: charging a stage for both its incoming and its outgoing transfer (a device that
blocks on every send and receive). Its time would then depend on the cut where it starts,
which is not monotone in the start, so the interval property of the fast check and the
two-index state of the DP both break (the DP would need the previous slot in its state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hetplan.errors import InfeasibleError, InputError

CommModel = Literal["outgoing", "overlap"]
SlotMode = Literal["subset", "prefix"]
CutTimeFn = Callable[[int, int], ArrayLike]
"""``(s_from, s_to) -> seconds per cut`` (length ``L - 1``) for the link from slot s_from to
s_to; vectorised over cuts because it is called once per slot pair."""
CutTime = ArrayLike | CutTimeFn

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


class PartitionInfeasible(InfeasibleError):  # noqa: N818 (name set by the plan API)
    """No placement of the layers on the slots fits; carries the numbers of the obstacle."""

    def __init__(
        self,
        message: str,
        *,
        slot: int | None = None,
        layer: int | None = None,
        needed_bytes: float | None = None,
        capacity_bytes: float | None = None,
    ) -> None:
        super().__init__(message)
        self.slot = slot
        self.layer = layer
        self.needed_bytes = needed_bytes
        self.capacity_bytes = capacity_bytes


@dataclass(frozen=True)
class Partition:
    """A pipeline partition: stage ``k`` runs layers ``stages[k]`` (half-open) on ``slots[k]``."""

    stages: tuple[tuple[int, int], ...]
    """Half-open layer ranges ``(start, end)``, contiguous, covering ``0..L``."""
    slots: tuple[int, ...]
    """Slot of each stage, strictly increasing."""
    compute_times: tuple[float, ...]
    """Seconds of compute of each stage per micro-batch."""
    send_times: tuple[float, ...]
    """Seconds of the handoff to the next stage (0 for the last)."""
    stage_times: tuple[float, ...]
    """Compute and send combined by the comm model."""
    stage_mem: tuple[float, ...]
    """Bytes each stage needs on its slot."""
    bottleneck: float
    """Max stage time: seconds per micro-batch in steady state."""
    total_time: float
    """Sum of stage times (one micro-batch's trip through the pipeline); the tie-breaker."""
    exact: bool
    """True when the bottleneck is proved optimal."""
    method: str
    """Which algorithm produced it."""

    @property
    def num_stages(self) -> int:
        return len(self.stages)


@dataclass(frozen=True)
class Problem:
    """Validated, normalised inputs; arrays indexed ``[slot, ...]``."""

    num_layers: int
    num_slots: int
    time_prefix: Floats
    """(S, L+1) prefix sums of layer times, infinite layers counted as 0."""
    inf_prefix: Ints
    """(S, L+1) prefix counts of infinite layer times (a stage holding one is impossible)."""
    mem_prefix: Floats
    """(S, L+1) prefix sums of layer memory."""
    fixed_mem: Floats
    mem_cap: Floats
    cut: Floats
    """(S, S, L-1): seconds of cut c from slot s to slot t; inf where not allowed (t <= s)."""
    adjacent: bool
    """Only hops s -> s+1 exist (prefix mode or (S-1, L-1) cut_time)."""
    cut_max: float
    """Largest finite cut time (0 if none)."""
    comm: CommModel
    mode: SlotMode

    def combine(self, compute: Floats | float, send: Floats | float) -> Floats:
        """Stage time from compute and handoff seconds (see the module docstring)."""
        if self.comm == "outgoing":
            return np.add(compute, send)
        return np.maximum(compute, send)

    def compute(self, s: int, i: int, j: int) -> float:
        if self.inf_prefix[s, j] - self.inf_prefix[s, i] > 0:
            return float("inf")
        return float(self.time_prefix[s, j] - self.time_prefix[s, i])

    def mem(self, s: int, i: int, j: int) -> float:
        return float(self.fixed_mem[s] + (self.mem_prefix[s, j] - self.mem_prefix[s, i]))

    def start_slots(self) -> range:
        return range(1) if self.mode == "prefix" else range(self.num_slots)

    def evaluate(
        self, stages: Sequence[tuple[int, int]], slots: Sequence[int], *, exact: bool, method: str
    ) -> Partition:
        """The Partition of an explicit placement, with every time computed the shared way."""
        n = len(stages)
        comp = [self.compute(slots[k], *stages[k]) for k in range(n)]
        send = [
            float(self.cut[slots[k], slots[k + 1], stages[k][1] - 1]) if k + 1 < n else 0.0
            for k in range(n)
        ]
        times = [float(self.combine(c, x)) for c, x in zip(comp, send, strict=True)]
        return Partition(
            stages=tuple((int(i), int(j)) for i, j in stages),
            slots=tuple(int(s) for s in slots),
            compute_times=tuple(comp),
            send_times=tuple(send),
            stage_times=tuple(times),
            stage_mem=tuple(self.mem(slots[k], *stages[k]) for k in range(n)),
            bottleneck=max(times),
            total_time=float(sum(times)),
            exact=exact,
            method=method,
        )


def _per_slot(name: str, values: ArrayLike, s: int, nl: int) -> Floats:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = np.broadcast_to(arr, (s, arr.shape[0]))
    if arr.shape != (s, nl):
        raise InputError(f"{name}: expected shape ({nl},) or ({s}, {nl}), got {arr.shape}")
    return arr


def _vector(name: str, values: ArrayLike | None, s: int, default: float) -> Floats:
    arr = np.full(s, default) if values is None else np.asarray(values, dtype=np.float64)
    arr = np.broadcast_to(arr, (s,)) if arr.ndim == 0 else arr
    if arr.shape != (s,):
        raise InputError(f"{name}: expected {s} values (one per slot), got shape {arr.shape}")
    return arr


def _check(name: str, arr: Floats, *, allow_inf: bool) -> None:
    if (arr.min(initial=0.0) >= 0) and (allow_inf or arr.max(initial=0.0) < np.inf):
        return  # fast path (also rules out nan, which makes min and max nan)
    bad = np.isnan(arr) | (arr < 0) | (~np.isfinite(arr) if not allow_inf else False)
    if np.any(bad):
        where = tuple(int(k) for k in np.argwhere(bad)[0])
        raise InputError(f"{name}{list(where)} = {arr[where]}: expected a number >= 0")


def _cut_array(cut_time: CutTime, s: int, nl: int, mode: SlotMode) -> Floats:
    """Normalise cut_time to (S, S, L-1), inf where the pair is not a usable hop."""
    pairs = [(a, a + 1) for a in range(s - 1)]
    if callable(cut_time):
        cut = np.full((s, s, max(nl - 1, 0)), np.inf)
        if mode == "subset":
            pairs = [(a, b) for a in range(s) for b in range(a + 1, s)]
        for a, b in pairs:
            row = np.asarray(cut_time(a, b), dtype=np.float64).reshape(-1)
            if row.shape != (nl - 1,):
                raise InputError(f"cut_time({a}, {b}): expected {nl - 1} values, got {row.shape}")
            cut[a, b] = row
    else:
        arr = np.asarray(cut_time, dtype=np.float64)
        if arr.shape == (s - 1, nl - 1):  # adjacent slots only
            cut = np.full((s, s, max(nl - 1, 0)), np.inf)
            for a, b in pairs:
                cut[a, b] = arr[a]
        elif arr.shape == (s, s, nl - 1):
            hop = np.triu(np.ones((s, s), dtype=bool), 1)
            if mode == "prefix":
                hop &= np.eye(s, k=1, dtype=bool)
            cut = np.where(hop[:, :, None], arr, np.inf)
        else:
            raise InputError(
                f"cut_time: expected shape ({s - 1}, {nl - 1}) or ({s}, {s}, {nl - 1}), "
                f"got {arr.shape}"
            )
    _check("cut_time", cut, allow_inf=True)
    return cut


def _only_adjacent(cut: Floats) -> bool:
    s = cut.shape[0]
    far = np.triu(np.ones((s, s), dtype=bool), 2)  # pairs t >= s + 2
    return bool(np.isinf(cut[far]).all()) if far.any() else True


def make_problem(
    layer_time: ArrayLike,
    cut_time: CutTime,
    *,
    layer_mem: ArrayLike | None = None,
    fixed_mem: ArrayLike | None = None,
    mem_cap: ArrayLike | None = None,
    comm: CommModel = "outgoing",
    slots: SlotMode = "subset",
) -> Problem:
    """Validate and normalise the partitioners' inputs (see ``partition_exact``)."""
    times = np.asarray(layer_time, dtype=np.float64)
    if times.ndim != 2 or times.shape[0] < 1 or times.shape[1] < 1:
        raise InputError(f"layer_time: expected shape (slots, layers), got {times.shape}")
    s, nl = times.shape
    if comm not in ("outgoing", "overlap"):
        raise InputError(f"comm: expected 'outgoing' or 'overlap', got {comm!r}")
    if slots not in ("subset", "prefix"):
        raise InputError(f"slots: expected 'subset' or 'prefix', got {slots!r}")
    _check("layer_time", times, allow_inf=True)
    mem = _per_slot("layer_mem", np.zeros(nl) if layer_mem is None else layer_mem, s, nl)
    _check("layer_mem", mem, allow_inf=False)
    fixed = _vector("fixed_mem", fixed_mem, s, 0.0)
    _check("fixed_mem", fixed, allow_inf=False)
    cap = _vector("mem_cap", mem_cap, s, np.inf)
    _check("mem_cap", cap, allow_inf=True)
    infs = np.isinf(times)
    zero = np.zeros((s, 1))
    cut = _cut_array(cut_time, s, nl, slots)
    return Problem(
        num_layers=nl,
        num_slots=s,
        time_prefix=np.hstack([zero, np.cumsum(np.where(infs, 0.0, times), axis=1)]),
        inf_prefix=np.hstack([zero.astype(np.int64), np.cumsum(infs, axis=1, dtype=np.int64)]),
        mem_prefix=np.hstack([zero, np.cumsum(mem, axis=1)]),
        fixed_mem=fixed,
        mem_cap=cap,
        cut=cut,
        adjacent=slots == "prefix" or _only_adjacent(cut),
        cut_max=float(np.max(cut, where=np.isfinite(cut), initial=0.0)),
        comm=comm,
        mode=slots,
    )
