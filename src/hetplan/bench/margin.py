"""The feasibility margin from measured peaks (``benchmarks/bench_memory_margin.py``).

A device kind's margin is how far above its prediction a run's peak memory went: the
``quantile`` of ``measured / predicted`` peak bytes over the measured runs (a run's ratio is
that of its rank with the largest one: a plan fails when any rank does not fit), never below 1
(the prediction is not discounted), divided by ``1 - fragmentation`` where the allocator
reserves more than it hands out (CUDA's caching allocator: the measured figure is
``max_memory_allocated``, what the process holds is reserved segments). The predicted terms
times the margin must fit (:mod:`hetplan.cost.memory_margin`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hetplan.run.measurement.measure import percentile

MARGIN_QUANTILE = 1.0
"""The largest ratio measured: with the margin, no measured run would have been called a fit
had its device's capacity been its measured peak ("every real out-of-memory flagged")."""
GPU = "gpu"
CPU = "cpu"


def kind_of(source: str) -> str:
    """The device kind a rank's memory figure was measured on (``RankMemory.source``):
    ``cuda.max_memory_allocated`` is a GPU's, ``tensor bytes`` a CPU's."""
    return GPU if source.startswith("cuda") else CPU


def case_peak_ratios(results: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per device kind, one ``measured / predicted`` ratio per case of a ``hetplan bench``
    result (its ``results.json`` as data): the largest over the case's ranks of that kind that
    have a positive prediction (``predicted_bytes`` is already without the framework
    allowance, ``bench.runner.comparable_memory``). Cases without memory figures are skipped."""
    out: dict[str, list[float]] = {}
    for case in results.get("cases", []):
        worst: dict[str, float] = {}
        for rank in case.get("memory", []):
            predicted = rank.get("predicted_bytes")
            if predicted is None or not predicted > 0:
                continue
            kind = kind_of(str(rank.get("source", "")))
            ratio = float(rank["measured_bytes"]) / float(predicted)
            worst[kind] = max(worst.get(kind, ratio), ratio)
        for kind, ratio in worst.items():
            out.setdefault(kind, []).append(ratio)
    return out


def peak_ratio(ratios: Iterable[float], quantile: float = MARGIN_QUANTILE) -> float:
    """The ``quantile`` (0-1, linear interpolation) of the measured/predicted ratios, at
    least 1. Raises ValueError without a ratio."""
    values = list(ratios)
    if not values:
        raise ValueError("no measured/predicted peak ratio: nothing to derive a margin from")
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1] (got {quantile})")
    return max(percentile(values, 100.0 * quantile), 1.0)


def margin_of(ratio: float, fragmentation: float = 0.0) -> float:
    """The factor on the predicted terms: ``ratio / (1 - fragmentation)`` (``fragmentation``:
    the fraction of the allocator's reserved bytes not handed out, 0 where none)."""
    if not 0.0 <= fragmentation < 1.0:
        raise ValueError(f"fragmentation must be in [0, 1) (got {fragmentation})")
    return ratio / (1.0 - fragmentation)
