"""Rendering the suite's report from a synthetic result: files, figures and figures' names."""

from __future__ import annotations

from pathlib import Path

from hetplan.bench.report import GANTT, PARETO, SCATTER, write_report
from hetplan.bench.types import PLANNER, CaseResult, ParetoPoint, PlannerTiming, SuiteResult
from hetplan.planspec.trace import Span
from hetplan.report.document import Document


def _case(cluster: str, strategy: str, predicted: float, measured: float) -> CaseResult:
    spans = [
        Span(device="r0", kind="fwd", microbatch=0, start=0.0, end=0.01),
        Span(device="r1", kind="fwd", microbatch=0, start=0.01, end=0.02),
        Span(device="r1", kind="bwd", microbatch=0, start=0.02, end=0.04),
        Span(device="r0", kind="bwd", microbatch=0, start=0.04, end=0.06),
    ]
    return CaseResult(
        model="m", cluster=cluster, strategy=strategy, label=f"{strategy} plan", ranks=2,
        predicted_s=predicted, measured_s=measured, measured_p10_s=measured,
        measured_p90_s=measured, plan={}, simulated=spans, measured=spans,
    )  # fmt: skip


def _result() -> SuiteResult:
    h = "local-cpu-hetero"
    return SuiteResult(
        quick=True, steps=2, warmup=1,
        cases=[_case(h, "dp", 0.1, 0.12), _case(h, "gpipe", 0.1, 0.3),
               _case(h, PLANNER, 0.08, 0.1)],
        planner_timings=[PlannerTiming(model="m", layers=5, devices=3, seconds=0.02,
                                       candidates=11)],
        pareto_model="m on local-cpu-hetero",
        pareto=[ParetoPoint(time_s=0.1, energy_j=5.0, label="a", on_front=True),
                ParetoPoint(time_s=0.2, energy_j=4.0, label="b", on_front=True),
                ParetoPoint(time_s=0.3, energy_j=6.0, label="c", on_front=False)],
        machine={"cpu": "test", "cores": "2", "load_before": "0.1", "load_after": "0.2"},
        command="hetplan bench --quick",
    )  # fmt: skip


def test_report_files_and_figures(tmp_path: Path) -> None:
    md, page = write_report(_result(), tmp_path)
    for name in (SCATTER, PARETO):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG"), name
    text = md.read_text()
    html = page.read_text()
    for name in (SCATTER, GANTT, PARETO):
        assert f"({name})" in text
    for name in (SCATTER, PARETO):
        assert f"src='{name}'" in html
    gantt = (tmp_path / GANTT).read_text()  # one trace per kind and panel, from the spans
    assert gantt.startswith("<!doctype html>") and '"name":"forward"' in gantt.replace(" ", "")
    # errors +20%, +200%, +25%: median 25%; the dp baseline 0.12 s / pick 0.1 s = 1.20x
    assert "median 25.0%" in text
    assert "1.20x" in text
    # the cases table ends with the time error, the profile-free prediction's error and the
    # memory error (neither recorded here)
    assert "| measured ms (p10-p90) | error | analytical error | memory error |" in text
    assert "| +20.0% | - |" in text
    assert "Peak memory: no case has a memory figure." in text
    assert "hetplan bench --quick" in text
    # the pick (0.1 s) is the measured fastest: selection target met
    assert "| pick within 5% of fastest in >= 90% | 100.0% | yes |" in text
    # median 25% misses the 10% target by 15 points, and the report says why
    assert "| median abs error <= 10% | 25.0% | NO | by 15.0% | predictions too low" in text


def test_document_escapes_html_and_keeps_table_shape() -> None:
    doc = Document("t")
    doc.table(["a", "b"], [["<x>", "2"]])
    assert "&lt;x&gt;" in doc.html()
    assert doc.markdown().splitlines()[2:5] == ["| a | b |", "|---|---|", "| <x> | 2 |"]
