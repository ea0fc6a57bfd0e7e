"""Measure a cluster's plans in interleaved rounds.

On the shared development machine a plan's step time drifts by up to 1.5x over minutes
(2026-11-29: the same 2-rank dp plan of resnet-tiny measured 20.6 ms, then 13.1, 14.2 and
13.1 ms in four rounds alternated with ZeRO-1; docs/benchmarks.md). Measured one after the
other, two plans 5% apart are then ranked by when they ran, not by what they are. So every
plan of a model x cluster group is measured once per round, the rounds alternate the order
(forward, then backward: a drift over the round weighs on both ends alike), and a case's time
is the median of its rounds' times. The spread of a case's rounds is the machine's noise for
that case, measured in the same run (:func:`hetplan.bench.stats.round_spreads`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hetplan.cluster import Cluster
from hetplan.planspec import Plan
from hetplan.run.launch.spawn import RunError
from hetplan.run.measurement.measure import Measurement
from hetplan.run.train import measure_plan


@dataclass(kw_only=True)
class Pending:
    """One plan to measure in every round."""

    strategy: str
    plan: Plan
    label: str
    search_s: float | None = None
    """The planner's search seconds (its pick)."""
    runs: list[Measurement] = field(default_factory=list)
    failure: str | None = None
    """The first round's run error; the case is dropped (one failed round spoils the median)."""


def round_order(pending: Sequence[Pending], k: int) -> list[Pending]:
    """Round ``k``'s order: as listed on even rounds, reversed on odd ones."""
    return list(pending) if k % 2 == 0 else list(reversed(pending))


def measure_rounds(
    pending: Sequence[Pending],
    cluster: Cluster,
    *,
    rounds: int,
    steps: int,
    warmup: int,
    say: Callable[[str], None],
    measure: Callable[..., Measurement] = measure_plan,
) -> None:
    """Measure every plan of ``pending`` ``rounds`` times, interleaved (fills ``runs``; a run
    that fails sets ``failure`` and the plan is not measured again)."""
    for k in range(rounds):
        for p in round_order(pending, k):
            if p.failure is not None:
                continue
            prefix = f"round {k + 1}/{rounds}: " if rounds > 1 else ""
            say(f"{prefix}{p.label}")
            try:
                p.runs.append(measure(p.plan, cluster, steps=steps, warmup=warmup))
            except RunError as err:
                p.failure = str(err)


@dataclass(frozen=True, kw_only=True)
class Merged:
    """A plan's rounds as one measurement."""

    median_s: float
    """Median over the rounds of each round's (median) step time."""
    p10_s: float
    """The lowest round's 10th-percentile step."""
    p90_s: float
    """The highest round's 90th-percentile step."""
    rounds_s: list[float]
    """Each round's step time, in round order."""
    last: Measurement
    """The last round's measurement (its spans and peak memory are the case's)."""


def merge(runs: Sequence[Measurement]) -> Merged:
    """``runs`` (at least one) as one :class:`Merged`."""
    times = [m.measured_iteration_s for m in runs]
    return Merged(
        median_s=statistics.median(times),
        p10_s=min(m.iteration_p10_s for m in runs),
        p90_s=max(m.iteration_p90_s for m in runs),
        rounds_s=times,
        last=runs[-1],
    )
