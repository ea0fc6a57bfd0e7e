"""``report.md`` and ``report.html`` of a suite run, with its figures (PNG) beside them."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from hetplan.bench.stats import (
    PICK_TOLERANCE,
    TARGET_MEDIAN_ERROR,
    TARGET_P90_ERROR,
    TARGET_SELECTION,
    Summary,
    case_memory_error,
    summarize,
)
from hetplan.bench.suite import HETEROGENEOUS, PIPELINES
from hetplan.bench.targets import target_rows
from hetplan.bench.types import CaseResult, SuiteResult
from hetplan.report.charts import Point, pareto_chart, scatter_chart
from hetplan.report.document import Document
from hetplan.report.gantt import Panel, bars_of, gantt_figure, gantt_page
from hetplan.serde import write_text_atomic

SCATTER = "scatter.png"
GANTT = "gantt.html"
PARETO = "pareto.png"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def gantt_case(cases: list[CaseResult]) -> CaseResult | None:
    """The pipeline case to draw: a fixed GPipe/1F1B plan with measured spans, preferring the
    heterogeneous cluster (where stage times differ most)."""
    pipes = [c for c in cases if c.strategy in PIPELINES and c.measured and c.simulated]
    pipes.sort(key=lambda c: (c.cluster != HETEROGENEOUS, c.strategy != "1f1b"))
    return pipes[0] if pipes else None


def _plan_devices(case: CaseResult) -> list[str]:
    """The plan's devices in rank order (pipelines, then stages), from the plan as data."""
    pipes = case.plan.get("pipelines", [])
    return [str(d) for p in pipes for st in p["stages"] for d in st["devices"]]


def write_figures(result: SuiteResult, out: Path) -> dict[str, str]:
    """Draw the figures into ``out``; name -> file name of the ones drawn."""
    drawn: dict[str, str] = {}
    points = [Point(x=c.predicted_s, y=c.measured_s, group=c.cluster) for c in result.cases]
    if points:
        scatter_chart(points, out / SCATTER, title="Predicted vs measured iteration time")
        drawn["scatter"] = SCATTER
    case = gantt_case(result.cases)
    if case is not None:
        devices = _plan_devices(case) or list(dict.fromkeys(s.device for s in case.simulated))
        title = f"{case.model} on {case.cluster}: {case.label}"
        panels = [
            Panel(title="simulated", bars=bars_of(case.simulated)),
            Panel(title="executed (last timed step)", bars=bars_of(case.measured)),
        ]
        write_text_atomic(out / GANTT, gantt_page(gantt_figure(devices, panels), title))
        drawn["gantt"] = GANTT
    if result.pareto:
        pts = [(p.time_s, p.energy_j, p.on_front) for p in result.pareto]
        pareto_chart(pts, out / PARETO, title=f"Time vs energy: {result.pareto_model}")
        drawn["pareto"] = PARETO
    return drawn


def build_document(result: SuiteResult, summary: Summary, figures: dict[str, str]) -> Document:
    doc = Document("hetplan validation suite")
    doc.para(f"Command: `{result.command}`" if result.command else "")
    m = result.machine
    doc.para(
        f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, torch {m.get('torch', '?')};"
        f" load average (1/5/15 min) before {m.get('load_before', '?')}, after "
        f"{m.get('load_after', '?')}. {result.steps} timed steps after {result.warmup} warm-up "
        f"per case and round, {result.rounds} round(s), interleaved; measured = median over the "
        "rounds of the median step time of the slowest rank."
    )
    doc.heading("Targets")
    doc.table(["target", "value", "met", "miss", "likely cause"], target_rows(result, summary))
    _cases_section(doc, result, summary, figures)
    _selection_section(doc, summary)
    _figures_section(doc, result, figures)
    _planner_section(doc, result)
    if result.notes:
        doc.heading("Notes")
        doc.bullets(result.notes)
    return doc


def _cases_section(
    doc: Document, result: SuiteResult, summary: Summary, figures: dict[str, str]
) -> None:
    doc.heading("Predicted vs measured")
    doc.para(
        f"{summary.cases} cases; absolute error median {100 * summary.median_error:.1f}% "
        f"(target {100 * TARGET_MEDIAN_ERROR:.0f}%), p90 {100 * summary.p90_error:.1f}% "
        f"(target {100 * TARGET_P90_ERROR:.0f}%). error = (measured - predicted) / predicted."
    )
    doc.para(
        f"Against each case's 10th-percentile step instead of its median (the steps least "
        f"disturbed by other jobs on the shared machine): median absolute error "
        f"{100 * summary.median_error_p10:.1f}% (a secondary figure; the targets use medians)."
    )
    if summary.analytical_cases:
        doc.para(
            f"Without per-layer profiles (the analytical model on the device's calibration, "
            f"`hetplan calibrate`), {summary.analytical_cases} cases: absolute error median "
            f"{100 * summary.median_analytical_error:.1f}%, p90 "
            f'{100 * summary.p90_analytical_error:.1f}% (column "analytical error").'
        )
    doc.para(memory_summary(summary))
    doc.para(coverage_summary(summary))
    if summary.repeatability is not None:
        doc.para(
            f"Repeatability: plans measured twice (the planner's pick equal to a fixed plan) "
            f"differed by {100 * summary.repeatability:.1f}% (median): the noise floor of the "
            "machine, which no model can beat."
        )
    if summary.round_noise is not None:
        doc.para(
            f"Rounds: a case's rounds differed by {100 * summary.round_noise:.1f}% (median of "
            "max/min - 1): the noise floor measured in this run."
        )
    if "scatter" in figures:
        doc.image(figures["scatter"], "predicted vs measured scatter")
    rows = [
        [c.model, c.cluster, c.strategy, c.label, str(c.ranks), _ms(c.predicted_s),
         f"{_ms(c.measured_s)} ({_ms(c.measured_p10_s)}-{_ms(c.measured_p90_s)})", _pct(c.error),
         _pct(c.analytical_error), _pct(case_memory_error(c))]
        for c in result.cases
    ]  # fmt: skip
    head = ["model", "cluster", "strategy", "plan", "ranks", "predicted ms",
            "measured ms (p10-p90)", "error", "analytical error", "memory error"]  # fmt: skip
    doc.table(head, rows)
    doc.para("Median signed error by strategy and cluster (where the model is biased):")
    doc.table(["group", "cases", "median error"], bias_rows(result.cases))


def coverage_summary(summary: Summary) -> str:
    """How often the measured time fell inside its predicted 80% interval."""
    if summary.interval_coverage is None or summary.default_coverage is None:
        return "Intervals: too few cases to check their coverage."
    return (
        f"Intervals (80%, docs/planning.md): {100 * summary.interval_coverage:.0f}% of the "
        "measurements fall inside the interval the suite's other cases give their prediction "
        f"(leave one out); {100 * summary.default_coverage:.0f}% inside the default band of "
        "profiled CPU predictions (no history)."
    )


def memory_summary(summary: Summary) -> str:
    """The peak-memory figures' paragraph (beside the time error's)."""
    how = (
        "memory error = (measured - predicted) / predicted peak bytes of a rank, the "
        "prediction without its framework allowance (the fixed CUDA context / allocator "
        "reserve, which the measurement does not see: live tensor bytes on CPU, the "
        "allocator's peak on CUDA); per case the rank with the largest absolute error."
    )
    if summary.memory_cases == 0:
        return f"Peak memory: no case has a memory figure. {how[0].upper()}{how[1:]}"
    return (
        f"Peak memory ({summary.memory_cases} cases): absolute memory error median "
        f"{100 * summary.median_memory_error:.1f}%, p90 {100 * summary.p90_memory_error:.1f}%; "
        + how
    )


def bias_rows(cases: list[CaseResult]) -> list[list[str]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for c in cases:
        groups[f"strategy {c.strategy}"].append(c.error)
        groups[f"cluster {c.cluster}"].append(c.error)
        groups[f"model {c.model}"].append(c.error)
    return [[k, str(len(v)), _pct(statistics.median(v))] for k, v in sorted(groups.items())]


def _pct_or_dash(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _selection_section(doc: Document, summary: Summary) -> None:
    doc.heading("Selection accuracy and plan quality")
    acc = summary.selection_accuracy
    doc.para(
        f"Pick within {100 * PICK_TOLERANCE:.0f}% of the measured fastest in "
        f"{'-' if acc is None else f'{100 * acc:.0f}%'} of the model x cluster cases "
        f"(target {100 * TARGET_SELECTION:.0f}%); exactly the fastest in "
        f"{'-' if summary.selection_exact is None else f'{100 * summary.selection_exact:.0f}%'}."
        f" Against the synchronous cases only (the plans `plan` chooses from without "
        f"--asynchronous): {_pct_or_dash(summary.selection_accuracy_synchronous)}."
    )
    if summary.selection_accuracy_best_round is not None:
        doc.para(
            "With every plan timed by its fastest round (a disturbed machine only slows a "
            "run, so this ranks the plans' undisturbed speeds): "
            f"{_pct_or_dash(summary.selection_accuracy_best_round)}."
        )
    misses = [x for x in summary.selections if not x.hit]
    if misses:
        resolved = sum(x.resolved_miss for x in misses)
        doc.para(
            f"Misses the measurement resolves (slowdown beyond the rounds' spread of the pick "
            f"and the fastest): {resolved} of {len(misses)}."
        )
    rows = [
        [s.model, s.cluster, s.pick, s.fastest, _pct(s.slowdown), "yes" if s.hit else "no",
         _pct(s.noise), _pct(s.synchronous_slowdown)]
        for s in summary.selections
    ]  # fmt: skip
    doc.table(["model", "cluster", "planner's pick", "fastest", "pick slowdown", "hit",
               "rounds' spread", "vs fastest synchronous"], rows)  # fmt: skip
    rows = [
        [model, _x(f.get("vs_dp")), _x(f.get("vs_equal_pipeline"))]
        for model, f in summary.speedups.items()
    ]
    rows.append(["geometric mean", _x(summary.speedup_vs_dp),
                 _x(summary.speedup_vs_equal_pipeline)])  # fmt: skip
    doc.para(f"Measured speedup of the planner's plan on {HETEROGENEOUS}:")
    doc.table(["model", "vs dp (equal batch split)", "vs equal-layer pipeline"], rows)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _figures_section(doc: Document, result: SuiteResult, figures: dict[str, str]) -> None:
    if "gantt" in figures:
        doc.heading("Simulated and measured timeline")
        doc.para(
            "Compute actions (forward, backward, optimizer) of one plan: above, the "
            "simulator's first iteration; below, the runtime's last timed step (device time on "
            f"CUDA, the host clock on CPU). Gaps are communication and waiting: "
            f"[{figures['gantt']}]({figures['gantt']}) (interactive)."
        )
    if "pareto" in figures:
        doc.heading("Time vs energy")
        doc.para(f"All ranked candidates of the planner for {result.pareto_model}, predicted.")
        doc.image(figures["pareto"], "pareto front time vs energy")


def _planner_section(doc: Document, result: SuiteResult) -> None:
    if not result.planner_timings:
        return
    doc.heading("Planner speed")
    rows = [
        [t.model, str(t.layers), str(t.devices), str(t.candidates), f"{t.seconds:.2f}"]
        for t in sorted(result.planner_timings, key=lambda t: (t.layers, t.devices))
    ]
    doc.table(["model", "layers", "devices", "candidates screened", "search s"], rows)


def write_report(result: SuiteResult, out: Path) -> tuple[Path, Path]:
    """Write the figures, ``report.md`` and ``report.html`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    figures = write_figures(result, out)
    doc = build_document(result, summarize(result.cases), figures)
    md = out / "report.md"
    page = out / "report.html"
    md.write_text(doc.markdown())
    page.write_text(doc.html())
    return md, page
