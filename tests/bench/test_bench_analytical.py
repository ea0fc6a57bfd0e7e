"""The suite's profile-free (calibrated analytical) error beside the profile-driven one, on
synthetic cases checked by hand (no real runs)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from hetplan.bench.report import write_report
from hetplan.bench.stats import summarize
from hetplan.bench.types import CaseResult, SuiteResult
from hetplan.serde import from_data, to_data


def case(predicted: float, analytical: float | None, measured: float) -> CaseResult:
    return CaseResult(
        model="m", cluster="c", strategy="dp", label="dp", ranks=1, predicted_s=predicted,
        measured_s=measured, measured_p10_s=measured, measured_p90_s=measured, plan={},
        predicted_analytical_s=analytical,
        analytical_source="calibrated on cpu" if analytical else "",
    )  # fmt: skip


CASES = [case(1.0, 0.8, 1.0), case(1.0, 1.25, 1.0), case(2.0, 2.0, 2.2), case(1.0, None, 1.0)]


def test_analytical_error_by_hand() -> None:
    # (1.0 - 0.8) / 0.8 = +25%; (1.0 - 1.25) / 1.25 = -20%; (2.2 - 2.0) / 2.0 = +10%.
    errs = [c.analytical_error for c in CASES]
    assert errs[:3] == [pytest.approx(0.25), pytest.approx(-0.2), pytest.approx(0.1)]
    assert errs[3] is None
    s = summarize(CASES)
    assert s.analytical_cases == 3
    assert s.median_analytical_error == pytest.approx(0.2)
    assert not math.isnan(s.p90_analytical_error)


def test_no_analytical_figure_is_nan() -> None:
    s = summarize([CASES[3]])
    assert s.analytical_cases == 0 and math.isnan(s.median_analytical_error)


def test_round_trip_and_report(tmp_path: Path) -> None:
    result = SuiteResult(quick=True, steps=1, warmup=0, cases=CASES)
    back = from_data(SuiteResult, json.loads(json.dumps(to_data(result))), "<test>")
    assert back.cases == CASES
    old = {k: v for k, v in to_data(CASES[0]).items() if "analytical" not in k}
    assert from_data(CaseResult, old, "<old>") == dataclasses.replace(
        CASES[0], predicted_analytical_s=None, analytical_source=""
    )
    md, _ = write_report(result, tmp_path)
    text = md.read_text()
    assert "Without per-layer profiles" in text and "3 cases: absolute error median 20.0%" in text
    assert "| +25.0% |" in text
