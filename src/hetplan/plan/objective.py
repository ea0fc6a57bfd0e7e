"""Objectives, limits and the Pareto front: pure functions over predicted figures.

An objective turns one candidate's predicted metrics into a score to minimise. Single metrics
are minimised as they are (throughput is maximised); a weighted mix ``time=0.5,energy=0.5`` is a
weighted geometric mean of each metric relative to the best candidate's value, so that units
cancel and a 10% gain counts the same for every metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.errors import InputError

METRICS = ("time", "throughput", "power", "energy", "edp", "cost")


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """The predicted figures an objective can use, for one training iteration."""

    time_s: float
    """Iteration time (one optimizer step over the global batch), seconds."""
    samples_per_s: float
    power_w: float
    """Average cluster power over the iteration, watts."""
    energy_j: float
    """Energy per iteration, joules."""
    dollars: float | None
    """Rental cost per iteration, USD (None when a device has no price)."""
    devices: int
    """Number of devices used."""

    @property
    def edp(self) -> float:
        """Energy-delay product per iteration, J*s."""
        return self.energy_j * self.time_s

    def value(self, metric: str) -> float:
        """The figure to minimise for ``metric``."""
        if metric == "time":
            return self.time_s
        if metric == "throughput":
            return 1.0 / self.samples_per_s if self.samples_per_s > 0 else math.inf
        if metric == "power":
            return self.power_w
        if metric == "energy":
            return self.energy_j
        if metric == "edp":
            return self.edp
        if metric == "cost":
            return math.inf if self.dollars is None else self.dollars
        raise InputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")


@dataclass(frozen=True, kw_only=True)
class Objective:
    """What to minimise: one metric, or a weighted mix of several."""

    weights: dict[str, float]

    @property
    def name(self) -> str:
        if len(self.weights) == 1:
            return next(iter(self.weights))
        return ",".join(f"{k}={v:g}" for k, v in self.weights.items())

    def scores(self, metrics: Sequence[Metrics]) -> list[float]:
        """Score every candidate (lower is better); mixes are relative to the best value."""
        if len(self.weights) == 1:
            metric = next(iter(self.weights))
            return [m.value(metric) for m in metrics]
        best = {k: min((m.value(k) for m in metrics), default=1.0) for k in self.weights}
        total = sum(self.weights.values())
        out = []
        for m in metrics:
            log_score = 0.0
            for k, w in self.weights.items():
                v = m.value(k)
                ref = best[k] if best[k] > 0 else 1.0
                log_score += (w / total) * math.log(v / ref) if v > 0 else -math.inf
            out.append(math.exp(log_score))
        return out


def parse_objective(text: str) -> Objective:
    """``time`` | ``energy`` | ... or a mix ``time=0.7,energy=0.3``."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        name = name.strip().lower()
        if name not in METRICS:
            raise InputError(
                f"--objective: unknown metric {name!r}; expected one of {', '.join(METRICS)}"
            )
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise InputError(f"--objective: weight of {name!r} must be a number") from None
        if w <= 0:
            raise InputError(f"--objective: weight of {name!r} must be > 0 (got {w:g})")
        weights[name] = w
    return Objective(weights=weights)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Hard limits; a candidate that breaks one is rejected with the numbers."""

    max_power_w: float | None = None
    max_devices: int | None = None
    min_devices: int | None = None
    """Fewest devices a plan must use (``plan --min-devices``, ``--all-devices``)."""
    deadline_s: float | None = None
    """Longest acceptable epoch time (or iteration time without a dataset size), seconds."""
    budget_usd: float | None = None
    """Largest acceptable cost per epoch (or per iteration without a dataset size), USD."""

    def violations(self, m: Metrics, iterations: float) -> list[str]:
        """Reasons ``m`` breaks a limit; ``iterations`` per epoch scales time and dollars."""
        out = []
        if self.max_power_w is not None and m.power_w > self.max_power_w:
            out.append(f"power {m.power_w:.0f} W > limit {self.max_power_w:.0f} W")
        if self.max_devices is not None and m.devices > self.max_devices:
            out.append(f"{m.devices} devices > limit {self.max_devices}")
        if self.min_devices is not None and m.devices < self.min_devices:
            out.append(f"{m.devices} devices < minimum {self.min_devices}")
        if self.deadline_s is not None and m.time_s * iterations > self.deadline_s:
            out.append(f"time {m.time_s * iterations:.1f} s > deadline {self.deadline_s:.1f} s")
        if self.budget_usd is not None:
            if m.dollars is None:
                out.append("budget set but a device has no price")
            elif m.dollars * iterations > self.budget_usd:
                out.append(f"cost ${m.dollars * iterations:.2f} > budget ${self.budget_usd:.2f}")
        return out


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated in both coordinates (both minimised), by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front: list[int] = []
    best_y = math.inf
    for i in order:
        if points[i][1] < best_y:
            front.append(i)
            best_y = points[i][1]
    return front
