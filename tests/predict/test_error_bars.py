"""Intervals from hetplan's measured error (issue 27, items 1-2): the conformal band by hand,
its coverage on recorded errors, the fall-back from the closest records to the defaults, the
history file, and the tie rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hetplan.predict.error_bars import (
    COVERAGE,
    DEFAULT_BANDS,
    HISTORY_FILE,
    MIN_RECORDS,
    ErrorModel,
    ErrorRecord,
    Interval,
    append_record,
    conformal_band,
    device_kind,
    load_history,
    source_class,
    ties_with_best,
)


def _rec(
    ratio: float, kind: str = "cpu", source: str = "calibrated", family: str = "dp"
) -> ErrorRecord:
    return ErrorRecord(source=source, kind=kind, family=family, predicted_s=1.0, measured_s=ratio)


def test_the_band_is_the_conformal_order_statistics() -> None:
    # n = 9 at 80%: k = ceil(10 x 0.9) = 9, the extremes; n = 8: k = 9 > 8, no band.
    ratios = [math.log(x) for x in (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 2.0)]
    assert conformal_band(ratios, 0.8) == pytest.approx((0.8, 2.0))
    assert conformal_band(ratios[:8], 0.8) is None
    assert MIN_RECORDS == 9
    # n = 19: k = ceil(20 x 0.9) = 18: the second smallest and second largest.
    many = [math.log(1 + i / 10) for i in range(19)]
    assert conformal_band(many, 0.8) == pytest.approx((1.1, 2.7))


def test_coverage_on_recorded_errors_is_the_stated_fraction() -> None:
    # Errors of a model that is 20% slow with a spread of 30% (log-normal), 200 past runs; the
    # conformal interval holds a new run with probability >= 80% (exchangeable errors).
    rng = np.random.default_rng(7)
    past, new = np.exp(rng.normal(0.2, 0.3, size=(2, 400)))
    model = ErrorModel(tuple(_rec(float(r)) for r in past[:200]))
    iv = model.interval_for(1.0, "calibrated", "cpu", "dp")
    inside = float(np.mean([iv.holds(float(x)) for x in new]))
    assert COVERAGE - 0.05 <= inside <= COVERAGE + 0.1
    assert iv.basis == "200 measured runs: cpu, calibrated, dp"


def test_the_closest_records_first_then_broader_then_the_default() -> None:
    history = [_rec(1.5) for _ in range(MIN_RECORDS)] + [
        _rec(3.0, family="gpipe") for _ in range(4)
    ]
    model = ErrorModel(tuple(history))
    dp = model.interval_for(2.0, "calibrated", "cpu", "dp")
    assert (dp.low_s, dp.high_s) == pytest.approx((3.0, 3.0))  # nine ratios of 1.5
    # gpipe has 4 records: too few; the 13 of (cpu, calibrated) decide.
    gpipe = model.interval_for(2.0, "calibrated", "cpu", "gpipe")
    assert gpipe.basis == f"{MIN_RECORDS + 4} measured runs: cpu, calibrated"
    assert (gpipe.low_s, gpipe.high_s) == pytest.approx((3.0, 6.0))
    gpu = model.interval_for(2.0, "calibrated", "gpu", "dp")
    lo, hi = DEFAULT_BANDS[("calibrated", "gpu")]
    assert (gpu.low_s, gpu.high_s) == pytest.approx((2.0 * lo, 2.0 * hi))
    assert gpu.basis == "no history; default for calibrated on gpu"
    mixed = model.interval_for(1.0, "catalog", "mixed", "dp")
    cpu_band, gpu_band = DEFAULT_BANDS[("catalog", "cpu")], DEFAULT_BANDS[("catalog", "gpu")]
    assert mixed.low_s == min(cpu_band[0], gpu_band[0])
    assert mixed.high_s == max(cpu_band[1], gpu_band[1])


def test_a_prediction_counts_as_its_least_trusted_source() -> None:
    assert source_class("measured on T4") == "profiled"
    assert source_class("measured on T4, learned on H100-SXM from 5 models") == "learned"
    assert source_class("calibrated on cpu, analytical") == "catalog"
    assert source_class("learned on A100, scaled to T4 by specs") == "transferred"
    assert source_class("scaled from V100-16GB (written back)") == "transferred"
    assert source_class("learned on H100-SXM from 2 models, scaled from A100-40GB") == "transferred"
    assert source_class("measured on cpu (1 thread, scaled to 6 threads)") == "profiled"
    assert source_class("calibrated on cpu, learned on A100, scaled to T4 by specs") == (
        "transferred"
    )
    assert device_kind(["cpu", "cpu-slow"]) == "cpu"
    assert device_kind(["T4", "V100-32GB"]) == "gpu"
    assert device_kind(["cpu", "T4"]) == "mixed"


def test_the_history_appends_and_skips_what_it_cannot_read(tmp_path: Path) -> None:
    append_record(tmp_path, _rec(1.2))
    append_record(tmp_path, ErrorRecord(source="catalog", kind="gpu", family="dp",
                                        predicted_s=0.0, measured_s=1.0))  # fmt: skip
    with open(tmp_path / HISTORY_FILE, "a") as f:
        f.write("not json\n" + json.dumps({"source": "x"}) + "\n")
    assert load_history(tmp_path) == [_rec(1.2)]
    assert load_history(tmp_path / "missing") == []


def test_plans_whose_interval_reaches_the_best_tie_with_it() -> None:
    def iv(lo: float, hi: float) -> Interval:
        return Interval(low_s=lo, high_s=hi, coverage=0.8, basis="hand")

    # Best 1.0-1.4: the second starts below 1.4 (a tie), the third at 1.5 (not), the fourth
    # touches 1.4 exactly (a tie: a measurement could land on it).
    ties = ties_with_best([iv(1.0, 1.4), iv(1.2, 1.9), iv(1.5, 2.0), iv(1.4, 3.0)])
    assert ties == [False, True, False, True]
    assert ties_with_best([]) == []
