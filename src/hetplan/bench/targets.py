"""Issue 6's targets: met or missed, by how much, and the likely cause read from the data."""

from __future__ import annotations

import statistics
from collections import defaultdict

from hetplan.bench.stats import (
    PICK_TOLERANCE,
    TARGET_MEDIAN_ERROR,
    TARGET_P90_ERROR,
    TARGET_SELECTION,
    Summary,
)
from hetplan.bench.suite import HETEROGENEOUS
from hetplan.bench.types import CaseResult, SuiteResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def error_cause(cases: list[CaseResult]) -> str:
    """Which way predictions lean and the group (strategy x cluster) that errs most."""
    if not cases:
        return "no cases"
    signed = statistics.median(c.error for c in cases)
    lean = (
        "predictions too low (measured slower): time the model does not see"
        if signed > 0
        else "predictions too high (measured faster)"
    )
    groups: dict[str, list[float]] = defaultdict(list)
    for c in cases:
        groups[f"{c.strategy} on {c.cluster}"].append(abs(c.error))
    worst = max(groups, key=lambda k: statistics.median(groups[k]))
    return (
        f"{lean} (median signed error {100 * signed:+.1f}%); largest errors: {worst} "
        f"(median abs error {_pct(statistics.median(groups[worst]))})"
    )


def selection_cause(summary: Summary, cases: list[CaseResult]) -> str:
    misses = [s for s in summary.selections if not s.hit]
    if not misses:
        return ""
    parts = []
    for s in misses:
        here = [c for c in cases if c.model == s.model and c.cluster == s.cluster]
        fast = min(here, key=lambda c: c.measured_s)
        pick = next(c for c in here if c.strategy == "planner")
        parts.append(
            f"{s.model} on {s.cluster}: predicted pick {1e3 * pick.predicted_s:.1f} ms vs "
            f"{fast.strategy} {1e3 * fast.predicted_s:.1f} ms, measured "
            f"{1e3 * pick.measured_s:.1f} vs {1e3 * fast.measured_s:.1f} ms (misranked by "
            f"prediction error)"
        )
    return "; ".join(parts)


def target_rows(result: SuiteResult, summary: Summary) -> list[list[str]]:
    """[target, value, met, miss, likely cause] per target."""
    cause = error_cause(result.cases)
    rows = []
    for name, value, goal in (
        ("median abs error <= 10%", summary.median_error, TARGET_MEDIAN_ERROR),
        ("p90 abs error <= 20%", summary.p90_error, TARGET_P90_ERROR),
    ):
        met = value <= goal
        rows.append([name, _pct(value), _yes(met), "" if met else f"by {_pct(value - goal)}",
                     "" if met else cause])  # fmt: skip
    acc = summary.selection_accuracy
    if acc is not None:
        met = acc >= TARGET_SELECTION
        rows.append([
            f"pick within {100 * PICK_TOLERANCE:.0f}% of fastest in >= 90%", _pct(acc),
            _yes(met), "" if met else f"by {_pct(TARGET_SELECTION - acc)} (worst pick "
            f"{_pct(summary.worst_pick_slowdown or 0.0)} slower)",
            "" if met else selection_cause(summary, result.cases),
        ])  # fmt: skip
    hetero = error_cause([c for c in result.cases if c.cluster == HETEROGENEOUS])
    for key, label in (("vs_dp", "dp (equal split)"), ("vs_equal_pipeline", "equal pipeline")):
        values = {m: f[key] for m, f in summary.speedups.items() if key in f}
        if not values:
            continue
        slow = {m: v for m, v in values.items() if v <= 1.0}
        shown = ", ".join(f"{m} {v:.2f}x" for m, v in values.items())
        rows.append([
            f"planner faster than {label} on {HETEROGENEOUS}", shown, _yes(not slow),
            "" if not slow else ", ".join(f"{m}: {1 / v - 1:.1%} slower" for m, v in slow.items()),
            "" if not slow else f"the planner's choice rests on the predictions: {hetero}",
        ])  # fmt: skip
    return rows


def _yes(met: bool) -> str:
    return "yes" if met else "NO"
