"""Summary statistics of timed samples and the straight-line fits used to price any size.

Both per-layer times (``t(b) = a + k*b`` over the batch size) and link times
(``t(s) = latency + s / bandwidth`` over the message size) are a fixed cost plus a cost per
unit, so one least-squares fit serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Spread of timed samples: the 10th and 90th percentiles (robust to a few outliers from a
# noisy, shared machine, unlike min/max; the source papers report medians after warm-up).
LOW_PERCENTILE = 10.0
HIGH_PERCENTILE = 90.0


@dataclass(frozen=True, kw_only=True)
class Stats:
    """Median and spread of repeated measurements, in seconds."""

    median_s: float
    p10_s: float
    p90_s: float


def summarize(samples: Sequence[float]) -> Stats:
    """Median and 10th/90th percentiles of ``samples`` (linear interpolation)."""
    if not samples:
        raise ValueError("no samples to summarize")
    arr = np.asarray(samples, dtype=float)
    low, med, high = np.percentile(arr, [LOW_PERCENTILE, 50.0, HIGH_PERCENTILE])
    return Stats(median_s=float(med), p10_s=float(low), p90_s=float(high))


@dataclass(frozen=True, kw_only=True)
class LinearFit:
    """``t(x) = a_s + k_s * x``: a fixed cost and a cost per unit (sample or byte)."""

    a_s: float
    """Fixed part, seconds (kernel launches, per-message latency)."""
    k_s: float
    """Seconds per unit of ``x`` (per sample, or per byte)."""

    def at(self, x: float) -> float:
        """Predicted time for size ``x``."""
        return self.a_s + self.k_s * x


def fit_linear(xs: Sequence[float], ts: Sequence[float], *, relative: bool = False) -> LinearFit:
    """Least-squares ``t = a + k*x`` with ``a, k >= 0`` (times never shrink with size).

    The unconstrained solution is used when both coefficients are non-negative; otherwise the
    better of the two one-parameter fits (``a = 0`` or ``k = 0``), which is the exact
    non-negative least-squares optimum for two unknowns. One distinct ``x`` gives ``k = 0``.

    ``relative``: minimise the residuals relative to each time (weights ``1 / t``), for sizes
    spanning decades (message sizes 1 KiB-32 MiB): an absolute fit follows the largest size
    alone, and its intercept, the latency, is what is left of that one point's error.
    """
    if len(xs) != len(ts) or not xs:
        raise ValueError(f"need matching, non-empty sizes and times (got {len(xs)}, {len(ts)})")
    x = np.asarray(xs, dtype=float)
    t = np.asarray(ts, dtype=float)
    w = 1.0 / np.maximum(t, 1e-12) if relative else np.ones_like(t)
    if np.ptp(x) > 0:
        design = np.stack([w, w * x], axis=1)
        (a, k), *_ = np.linalg.lstsq(design, w * t, rcond=None)
        if a >= 0 and k >= 0:
            return LinearFit(a_s=float(a), k_s=float(k))
    wx, wt = w * x, w * t
    candidates = [LinearFit(a_s=max(float(np.dot(w, wt) / np.dot(w, w)), 0.0), k_s=0.0)]
    if float(np.dot(wx, wx)) > 0:
        candidates.append(LinearFit(a_s=0.0, k_s=max(float(np.dot(wx, wt) / np.dot(wx, wx)), 0.0)))
    return min(candidates, key=lambda f: float(np.sum((w * (f.a_s + f.k_s * x - t)) ** 2)))
