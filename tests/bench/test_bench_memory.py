"""Peak-memory error of the suite: per rank, per case (worst rank), median and p90 over cases,
checked against hand computation on synthetic cases (no real runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from hetplan.bench.report import write_report
from hetplan.bench.runner import comparable_memory, rank_memory
from hetplan.bench.stats import (
    abs_memory_errors,
    case_memory_error,
    memory_error,
    summarize,
)
from hetplan.bench.types import CaseResult, RankMemory, SuiteResult
from hetplan.cli.main import main
from hetplan.planspec import Plan
from hetplan.predict import DevicePrediction, Prediction
from hetplan.run.measurement.measure import Measurement, RankFigures
from hetplan.serde import from_data, load_file, to_data


def rank(i: int, predicted: float | None, measured: int) -> RankMemory:
    return RankMemory(
        rank=i, device=f"d{i}", predicted_bytes=predicted, measured_bytes=measured,
        source="tensor bytes",
    )  # fmt: skip


def case(memory: list[RankMemory], predicted: float = 1.0, measured: float = 1.0) -> CaseResult:
    return CaseResult(
        model="m", cluster="c", strategy="dp", label="dp", ranks=len(memory),
        predicted_s=predicted, measured_s=measured, measured_p10_s=measured,
        measured_p90_s=measured, plan={}, memory=memory,
    )  # fmt: skip


CASES = [
    # ranks +10% and -25%: the worst is -25% (signed)
    case([rank(0, 100, 110), rank(1, 200, 150)]),
    # a rank without a prediction is left out: +5%
    case([rank(0, 1000, 1050), rank(1, None, 7)]),
    # no memory recorded (an old result): no figure
    case([]),
    # a zero prediction is no figure; the other rank +20%
    case([rank(0, 0, 10), rank(1, 400, 480)]),
    # measured twice the prediction: +100%
    case([rank(0, 50, 100)]),
]


def test_rank_error_by_hand() -> None:
    assert memory_error(rank(0, 100, 110)) == pytest.approx(0.10)
    assert memory_error(rank(0, 200, 150)) == pytest.approx(-0.25)
    assert memory_error(rank(0, None, 150)) is None
    assert memory_error(rank(0, 0, 150)) is None
    assert memory_error(rank(0, math.nan, 150)) is None


def test_case_error_is_the_worst_rank_signed() -> None:
    assert [case_memory_error(c) for c in CASES] == [
        pytest.approx(-0.25), pytest.approx(0.05), None, pytest.approx(0.20), pytest.approx(1.0),
    ]  # fmt: skip
    assert case_memory_error(case([rank(0, 100, 90), rank(1, 100, 130)])) == pytest.approx(0.3)


def test_memory_median_and_p90_by_hand() -> None:
    assert sorted(abs_memory_errors(CASES)) == pytest.approx([0.05, 0.2, 0.25, 1.0])
    s = summarize(CASES)
    assert s.cases == 5
    assert s.memory_cases == 4
    assert s.median_memory_error == pytest.approx(0.225)  # (0.2 + 0.25) / 2
    # p90 of [.05, .2, .25, 1] by linear interpolation: position 2.7 -> .25 + .7 * .75 = .775
    assert s.p90_memory_error == pytest.approx(0.775)
    # the time errors are those of the iteration times alone (all 0 here)
    assert s.median_error == 0.0 and s.p90_error == 0.0


def test_memory_percentiles_of_one_case_and_of_equal_cases() -> None:
    s = summarize([case([rank(0, 100, 80)])])
    assert s.median_memory_error == pytest.approx(0.2)
    assert s.p90_memory_error == pytest.approx(0.2)
    s = summarize([case([rank(0, 100, 130)]), case([rank(0, 100, 70)])])
    assert s.median_memory_error == pytest.approx(0.3)  # |+30%| and |-30%|
    assert s.p90_memory_error == pytest.approx(0.3)


def test_memory_error_nan_without_figures() -> None:
    for cases in ([], [case([])], [case([rank(0, None, 5), rank(1, 0, 5)])]):
        s = summarize(cases)
        assert math.isnan(s.median_memory_error) and math.isnan(s.p90_memory_error)
        assert s.memory_cases == 0


def test_runner_compares_without_the_framework_allowance() -> None:
    def device(dev: str, total: float, framework: float) -> DevicePrediction:
        return DevicePrediction(
            id=dev, type="cpu", role="worker", memory_bytes=total, memory_capacity_bytes=1e12,
            memory={"weights": total - framework, "framework": framework}, busy_fraction=1.0,
            power_w=1.0, compute_s=1.0, exposed_comm_s=0.0, bubble_s=0.0,
        )  # fmt: skip

    def figures(i: int, dev: str, peak: int) -> RankFigures:
        return RankFigures(
            rank=i, device=dev, pipeline=0, stage=i, step_s=1.0, forward_s=0.4, backward_s=0.5,
            optimizer_s=0.1, wait_s=0.0, peak_memory_bytes=peak, memory_source="tensor bytes",
        )  # fmt: skip

    prediction = cast(
        Prediction, SimpleNamespace(devices=[device("a", 1300, 300), device("b", 2000, 0)])
    )
    assert comparable_memory(prediction) == {"a": 1000, "b": 2000}
    m = Measurement(
        plan=cast(Plan, None), cluster="c", steps=1, warmup=0, measured_iteration_s=1.0,
        iteration_p10_s=1.0, iteration_p90_s=1.0, iteration_s=[1.0], loss=[1.0],
        ranks=[figures(0, "a", 1100), figures(1, "b", 1500), figures(2, "z", 9)],
    )  # fmt: skip
    got = rank_memory(m, prediction)
    assert got == [
        RankMemory(rank=0, device="a", predicted_bytes=1000, measured_bytes=1100,
                   source="tensor bytes"),
        RankMemory(rank=1, device="b", predicted_bytes=2000, measured_bytes=1500,
                   source="tensor bytes"),
        RankMemory(rank=2, device="z", predicted_bytes=None, measured_bytes=9,
                   source="tensor bytes"),
    ]  # fmt: skip
    assert case_memory_error(case(got)) == pytest.approx(-0.25)


OLD_CASE: dict[str, Any] = {
    "model": "m", "cluster": "local-cpu", "strategy": "dp", "label": "dp x2", "ranks": 2,
    "predicted_s": 0.1, "measured_s": 0.125, "measured_p10_s": 0.11, "measured_p90_s": 0.13,
    "plan": {},
}  # fmt: skip


def test_old_results_load_without_memory(tmp_path: Path) -> None:
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps({"quick": True, "steps": 1, "warmup": 0, "cases": [OLD_CASE]}))
    result = load_file(SuiteResult, saved)
    assert result.cases[0].memory == []
    assert case_memory_error(result.cases[0]) is None
    assert math.isnan(summarize(result.cases).median_memory_error)


def test_results_round_trip_with_memory() -> None:
    result = SuiteResult(quick=True, steps=1, warmup=0, cases=[CASES[0], CASES[2]])
    data = json.loads(json.dumps(to_data(result)))
    assert data["cases"][0]["memory"][1] == {
        "rank": 1, "device": "d1", "predicted_bytes": 200, "measured_bytes": 150,
        "source": "tensor bytes",
    }  # fmt: skip
    back = from_data(SuiteResult, data, "<test>")
    assert back.cases[0].memory == CASES[0].memory
    assert back.cases[1].memory == []


def test_report_shows_memory_error(tmp_path: Path) -> None:
    result = SuiteResult(quick=True, steps=1, warmup=0, cases=CASES)
    md, _ = write_report(result, tmp_path)
    text = md.read_text()
    assert "| error | analytical error | memory error |" in text
    # time error, no profile-free prediction, then the worst rank's memory error
    assert "| +0.0% | - | -25.0% |" in text
    assert "| +0.0% | - | - |" in text  # the case without memory
    assert "absolute memory error median 22.5%, p90 77.5%" in text
    assert "without its framework allowance" in text


def test_report_without_memory_says_so(tmp_path: Path) -> None:
    md, _ = write_report(SuiteResult(quick=True, steps=1, warmup=0, cases=[case([])]), tmp_path)
    assert "Peak memory: no case has a memory figure." in md.read_text()


def _bench_json(cases: list[dict[str, Any]], tmp_path: Path, capsys: Any) -> dict[str, Any]:
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps({"quick": True, "steps": 1, "warmup": 0, "cases": cases}))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--from-results", str(saved), "--out", str(tmp_path), "--json"])
    assert (exc.value.code or 0) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_bench_json_memory_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with_memory = {**OLD_CASE, "memory": [to_data(r) for r in CASES[0].memory]}
    data = _bench_json([with_memory, OLD_CASE], tmp_path, capsys)
    assert data["median_memory_error"] == pytest.approx(0.25)
    assert data["p90_memory_error"] == pytest.approx(0.25)
    assert data["memory_cases"] == 1
    first, old = data["cases"]
    assert first["memory_error"] == pytest.approx(-0.25)
    assert [r["error"] for r in first["memory"]] == [pytest.approx(0.1), pytest.approx(-0.25)]
    assert old["memory_error"] is None and old["memory"] == []


def test_bench_json_old_results_memory_null(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _bench_json([OLD_CASE], tmp_path, capsys)
    assert data["median_error"] == pytest.approx(0.25)
    assert data["median_memory_error"] is None  # null in the JSON, not NaN
    assert data["p90_memory_error"] is None
