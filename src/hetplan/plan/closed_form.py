"""The screening's closed-form iteration times of one pipeline, from its stage costs.

The simulator runs these schedules (``hetplan.schedule.pipeline``): GPipe runs every forward,
then every backward; 1F1B (PipeDream-Flush) lets stage ``s`` of ``S`` hold ``min(S - s, m)``
micro-batches and then strictly alternates one forward and one backward; PipeDream runs 1F1B
without a flush. A device, and each direction of a link, runs one thing at a time. So:

- ``path`` = every forward and backward + 2 x every cut: one micro-batch's own way through
  the pipeline and back (its transfers wait for its compute, and it for them);
- GPipe: ``path + (m - 1) (max(fwd, cuts) + max(bwd, cuts))``: each phase is paced by its
  slowest resource, a device or a link direction, which carries only that phase's transfers;
- 1F1B: ``path + max((m - 1) busy, (ceil(m / k) - 1) R)``, ``busy`` the slowest resource per
  micro-batch (a device's forward + backward, or a cut), and for every run of ``k``
  consecutive stages its round trip ``R`` (forwards, backwards and both ways of the cuts
  inside it): under strict alternation such a run holds at most ``min(k, m)`` micro-batches
  (each stage one more than the next), so it starts them ``k`` per round trip;
- after a flush each stage syncs its gradients across replicas (what its backward did not
  hide) and steps its optimizer once its last backward is done; stage ``s``'s backward ends
  ``sum_{k<s}(bwd_k + cut_k)`` before stage 0's;
- PipeDream (no flush): ``m`` micro-batches at the steady period ``max(busy, R / k)`` over
  the runs, or a stage's ``m`` forwards and backwards plus its optimizer step if longer.

``tests/plan/test_screen_vs_simulator.py`` measures how close these are to the simulation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from hetplan.planspec.order import Order


@dataclass(frozen=True, kw_only=True)
class StageCosts:
    """A pipeline's stages, per micro-batch (``opt``: per iteration), at its slowest replica."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    cut: tuple[float, ...]
    """Seconds to send the values after stage ``k`` to stage ``k + 1`` (one direction; the
    gradients back take as long)."""
    opt: tuple[float, ...]
    """Optimizer step of each stage, once per iteration."""
    sync: tuple[float, ...] = ()
    """Several replicas: the gradient all-reduce of each stage left after its last backward,
    before its optimizer step (empty: none)."""
    held: tuple[float, ...] = ()
    """Per stage and direction, seconds per micro-batch its cores spend on its transfers
    (CPU stages copy their own messages, ``schedule.work.StageWork.on_cores``: the cuts in and
    out); empty: none."""

    def loaded(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Forward and backward per micro-batch of each stage's device, transfers held included."""
        held = self.held or (0.0,) * len(self.fwd)
        fwd = tuple(f + h for f, h in zip(self.fwd, held, strict=True))
        return fwd, tuple(b + h for b, h in zip(self.bwd, held, strict=True))

    def busy(self) -> float:
        """The slowest resource's time per micro-batch: a device or a link direction."""
        fwd, bwd = self.loaded()
        return max([f + b for f, b in zip(fwd, bwd, strict=True)] + list(self.cut))

    def runs(self) -> Iterator[tuple[int, float]]:
        """``(k, R)`` for every run of ``k`` consecutive stages: its round trip ``R``."""
        compute = [
            0.0,
            *itertools.accumulate(f + b for f, b in zip(self.fwd, self.bwd, strict=True)),
        ]
        cuts = [0.0, *itertools.accumulate(self.cut)]
        n = len(self.fwd)
        for a in range(n):
            for b in range(a + 1, n + 1):
                yield b - a, compute[b] - compute[a] + 2 * (cuts[b - 1] - cuts[a])


def flushed_s(costs: StageCosts, m: int, order: Order) -> float:
    """One iteration of ``m`` micro-batches in GPipe or 1F1B ``order``, gradient syncs and
    optimizer steps included."""
    n = len(costs.fwd)
    path = sum(costs.fwd) + sum(costs.bwd) + 2 * sum(costs.cut)
    if order == "gpipe":
        cuts = list(costs.cut)
        fwd, bwd = costs.loaded()
        steady = (m - 1) * (max([*fwd, *cuts]) + max([*bwd, *cuts]))
    else:
        trips = [(math.ceil(m / min(k, m)) - 1) * r for k, r in costs.runs()]
        steady = max([(m - 1) * costs.busy(), *trips])
    drained = [sum(costs.bwd[:s]) + sum(costs.cut[:s]) for s in range(n)]
    sync = costs.sync or (0.0,) * n
    tail = max(y + o - d for y, o, d in zip(sync, costs.opt, drained, strict=True))
    return path + steady + max(tail, 0.0)


def asynchronous_s(costs: StageCosts, m: int) -> float:
    """PipeDream's steady state: ``m`` micro-batches per iteration, no flush."""
    period = max([costs.busy()] + [r / k for k, r in costs.runs()])
    fwd, bwd = costs.loaded()
    own = [m * (f + b) + o for f, b, o in zip(fwd, bwd, costs.opt, strict=True)]
    return max([m * period, *own])
