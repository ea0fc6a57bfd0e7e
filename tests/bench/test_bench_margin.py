"""The feasibility margin computed from a tiny hand-made set of measured peaks."""

from __future__ import annotations

from typing import Any

import pytest

from hetplan.bench.margin import case_peak_ratios, kind_of, margin_of, peak_ratio


def rank(predicted: float | None, measured: int, source: str = "tensor bytes") -> dict[str, Any]:
    return {"rank": 0, "device": "d", "predicted_bytes": predicted, "measured_bytes": measured,
            "source": source}  # fmt: skip


RESULTS: dict[str, Any] = {
    "cases": [
        # CPU ratios 1.10 and 0.90: the case's is its worst rank's, 1.10
        {"memory": [rank(100, 110), rank(200, 180)]},
        {"memory": [rank(100, 130)]},  # 1.30
        {"memory": [rank(100, 80)]},  # 0.80
        {"memory": [rank(None, 50), rank(0, 50)]},  # no prediction: skipped
        {"memory": []},  # no memory figures: skipped
        {},  # results saved before memory was recorded
        # one GPU rank: 1050 / 1000
        {"memory": [rank(1000, 1050, "cuda.max_memory_allocated")]},
    ]
}


def test_ratios_per_kind_worst_rank_of_each_case() -> None:
    ratios = case_peak_ratios(RESULTS)
    assert ratios["cpu"] == pytest.approx([1.10, 1.30, 0.80])
    assert ratios["gpu"] == pytest.approx([1.05])
    assert kind_of("cuda.max_memory_allocated") == "gpu"
    assert kind_of("tensor bytes") == "cpu"


def test_margin_by_hand() -> None:
    cpu = case_peak_ratios(RESULTS)["cpu"]  # sorted: 0.80, 1.10, 1.30
    assert peak_ratio(cpu) == pytest.approx(1.30)  # the largest (default quantile 1)
    assert peak_ratio(cpu, 0.5) == pytest.approx(1.10)
    # q0.75 by linear interpolation: position 1.5 -> 1.10 + 0.5 x 0.20 = 1.20
    assert peak_ratio(cpu, 0.75) == pytest.approx(1.20)
    assert peak_ratio([0.8, 0.9]) == 1.0  # the prediction is never discounted
    assert margin_of(1.30) == pytest.approx(1.30)
    # GPU: 1.05 / (1 - 0.15) = 1.2353
    assert margin_of(peak_ratio([1.05]), 0.15) == pytest.approx(1.05 / 0.85)
    assert 1 / margin_of(1.05, 0.15) == pytest.approx(0.8095, abs=1e-4)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="no measured"):
        peak_ratio([])
    with pytest.raises(ValueError, match="quantile"):
        peak_ratio([1.0], 1.5)
    with pytest.raises(ValueError, match="fragmentation"):
        margin_of(1.0, 1.0)
