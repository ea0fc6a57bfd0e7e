"""When a trial run has measured enough: the adaptive stopping rule of ``hetplan tune``.

After each timed step every rank holds the same iteration times (the slowest rank's step time,
shared by an all-reduce), so every rank takes the same decision without another message. A
trial stops once the mean iteration time is known to ``rel_halfwidth`` at 95% confidence
(Student's t interval), or once it is clearly slower than the best trial so far (the lower end
of its interval above the best), and never before ``min_timed`` timed steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% quantiles of Student's t, t_{0.975, df} for df = 1..30 (any t table, e.g.
# NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2); past 30 the normal 1.960.
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z_975 = 1.960  # two-sided 95% quantile of the standard normal
DEFAULT_REL_HALFWIDTH = 0.05  # stop once the mean is known to +-5%
DEFAULT_MIN_TIMED = 3  # timed steps before any decision (a t interval needs >= 2)


def t_975(df: int) -> float:
    """Two-sided 95% Student t quantile for ``df >= 1`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1 (got {df})")
    return T_975[df - 1] if df <= len(T_975) else Z_975


def halfwidth(times: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean of ``times`` (>= 2 values)."""
    n = len(times)
    return t_975(n - 1) * statistics.stdev(times) / math.sqrt(n)


@dataclass(frozen=True, kw_only=True)
class StopRule:
    """When to end a trial early (see the module docstring)."""

    rel_halfwidth: float = DEFAULT_REL_HALFWIDTH
    min_timed: int = DEFAULT_MIN_TIMED
    best_s: float | None = None
    """The best trial's measured iteration time so far (None: first trial, or an objective
    other than time, where being slower is not enough to lose)."""

    def decide(self, timed: Sequence[float]) -> str | None:
        """Why to stop after these timed iteration times, or None to go on."""
        n = len(timed)
        if n < max(2, self.min_timed):
            return None
        mean = statistics.fmean(timed)
        hw = halfwidth(timed)
        if self.best_s is not None and mean - hw > self.best_s:
            return f"clearly slower than the best trial ({mean - hw:.4g} s > {self.best_s:.4g} s)"
        if mean > 0 and hw / mean <= self.rel_halfwidth:
            return f"mean known to +-{100 * hw / mean:.1f}% (95% confidence) after {n} steps"
        return None
