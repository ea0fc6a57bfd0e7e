"""``hetplan bench``: the validation suite (predicted vs measured, selection, plan quality)."""

from __future__ import annotations

import dataclasses
import math
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hetplan.bench.suite import BENCH_STRATEGIES, FULL, QUICK, cluster_path, select_models
from hetplan.bench.types import PLANNER, SuiteResult
from hetplan.cli.output import console, print_json
from hetplan.cli.paths import check_output_dir
from hetplan.errors import InputError

# Torch, numpy, pydantic and matplotlib load inside the command that needs them: `hetplan
# --help` and the light commands stay quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.bench.stats import Summary

PLANNER_SIZES_FULL = (8, 16)
"""Extra homogeneous cluster sizes the full suite times the planner on (no run)."""


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _json(result: SuiteResult, summary: Summary, out: Path) -> dict[str, Any]:
    from hetplan.bench.stats import case_memory_error, memory_error
    from hetplan.serde import to_data

    data = {k: v for k, v in to_data(summary).items() if k not in ("selections", "speedups")}
    nullable = ("median_memory_error", "p90_memory_error", "median_analytical_error",
                "p90_analytical_error")  # fmt: skip
    for key in nullable:  # null, not NaN, when no figure
        data[key] = _finite(data[key])
    data["selections"] = [to_data(s) for s in summary.selections]
    data["speedups"] = summary.speedups
    data["cases"] = [
        {
            "model": c.model, "cluster": c.cluster, "strategy": c.strategy, "plan": c.label,
            "ranks": c.ranks, "predicted_s": c.predicted_s, "measured_s": c.measured_s,
            "error": c.error, "predicted_analytical_s": c.predicted_analytical_s,
            "analytical_error": c.analytical_error, "analytical_source": c.analytical_source,
            "planner_strategy": c.planner_strategy, "search_s": c.search_s,
            "memory_error": case_memory_error(c), "rounds_s": c.rounds_s,
            "memory": [{**to_data(r), "error": memory_error(r)} for r in c.memory],
        }
        for c in result.cases
    ]  # fmt: skip
    data["machine"] = result.machine
    data["report"] = str(out / "report.md")
    return data


def _strategies(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    for name in names:
        if name not in (*BENCH_STRATEGIES, PLANNER):
            raise InputError(
                f"--strategies: {name!r}; expected some of {', '.join(BENCH_STRATEGIES)}, {PLANNER}"
            )
    return names


def bench_cmd(
    quick: Annotated[bool, typer.Option("--quick", help="Fewer models and steps (~20-25 min).")] = (
        False
    ),
    out: Annotated[Path, typer.Option(help="Folder for the report and results.")] = Path(
        "out/bench"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    models: Annotated[
        str | None,
        typer.Option(help="Comma-separated suite models (name or name:batch) instead."),
    ] = None,
    clusters: Annotated[
        Path | None, typer.Option(help="Folder of the cluster files (default examples/clusters).")
    ] = None,
    cluster_names: Annotated[
        str | None, typer.Option("--cluster-names", help="Comma-separated cluster file names.")
    ] = None,
    only: Annotated[
        str | None,
        typer.Option("--strategies", help=f"Subset of {','.join(BENCH_STRATEGIES)},planner."),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Timed steps per case.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up steps per case.")] = None,
    rounds: Annotated[
        int | None,
        typer.Option(help="Times each plan is measured, interleaved with the others (default 3)."),
    ] = None,
    profile_dir: Annotated[
        Path | None, typer.Option(help="Profile store (default $HETPLAN_PROFILE_DIR or cache).")
    ] = None,
    from_results: Annotated[
        Path | None,
        typer.Option("--from-results", help="Re-render the report of a results.json (no run)."),
    ] = None,
    measure_links: Annotated[
        bool,
        typer.Option(
            help="Measure each cluster's links here first (as profile-links) and run and price "
            "the cases on the measured copies (OUT/clusters); --no-measure-links keeps the "
            "files' figures."
        ),
    ] = True,
) -> None:
    """Run the validation suite on this machine and write report.md / report.html."""
    from hetplan.bench.runner import run_suite
    from hetplan.serde import load_file, to_data, write_json_atomic

    if from_results is not None:
        check_output_dir(out, "--out")
        _finish(load_file(SuiteResult, from_results), out, as_json)
        return
    config = QUICK if quick else FULL
    changes: dict[str, Any] = {"cluster_dir": clusters}
    if models:
        changes["models"] = select_models([m.strip() for m in models.split(",") if m.strip()])
    if cluster_names:
        changes["clusters"] = tuple(c.strip() for c in cluster_names.split(",") if c.strip())
    if only:
        changes["only"] = _strategies(only)
    if steps is not None:
        changes["steps"] = steps
    if warmup is not None:
        changes["warmup"] = warmup
    if rounds is not None:
        if rounds < 1:
            raise InputError(f"--rounds: {rounds}; expected a positive integer")
        changes["rounds"] = rounds
    config = dataclasses.replace(config, **changes)
    check_output_dir(out, "--out")
    for name in config.clusters:  # every file before the first measurement
        cluster_path(name, config.cluster_dir)

    def progress(msg: str) -> None:
        if not as_json:
            console.print(f"[dim]{msg}[/dim]")

    notes: list[str] = []
    if measure_links:
        from hetplan.bench.links import measure_suite_links

        progress(f"measuring the links of {', '.join(config.clusters)}")
        measured, notes = measure_suite_links(config.clusters, config.cluster_dir, out)
        config = dataclasses.replace(config, cluster_dir=measured)
        for line in notes:
            progress(line)
    sizes = () if quick else PLANNER_SIZES_FULL
    result = run_suite(config, profile_dir=profile_dir, progress=progress, planner_sizes=sizes)
    result.notes += [f"links: {line}" for line in notes]
    result.quick = quick
    result.command = shlex.join(["hetplan", *sys.argv[1:]])
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", to_data(result))
    _finish(result, out, as_json)


def _finish(result: SuiteResult, out: Path, as_json: bool) -> None:
    from hetplan.bench.report import write_report
    from hetplan.bench.stats import summarize

    md, page = write_report(result, out)
    summary = summarize(result.cases)
    if as_json:
        print_json(_json(result, summary, out))
        return
    console.print(
        f"{summary.cases} cases: |error| median {100 * summary.median_error:.1f}%, "
        f"p90 {100 * summary.p90_error:.1f}%; selection accuracy {_fmt(summary.selection_accuracy)}"
        f"; speedup vs dp {_fmt(summary.speedup_vs_dp)}, vs equal pipeline "
        f"{_fmt(summary.speedup_vs_equal_pipeline)}"
    )
    if summary.analytical_cases:
        console.print(
            f"without profiles (calibrated analytical): |error| median "
            f"{100 * summary.median_analytical_error:.1f}%, "
            f"p90 {100 * summary.p90_analytical_error:.1f}%"
        )
    if summary.round_noise is not None:
        noise = _fmt(summary.round_noise)
        console.print(f"noise floor (median spread of a case's rounds): {noise}")
        best = _fmt(summary.selection_accuracy_best_round)
        console.print(f"selection accuracy with each plan's fastest round: {best}")
    if summary.interval_coverage is not None:
        console.print(
            f"measured inside the 80% interval: {_fmt(summary.interval_coverage)} (from the "
            f"other cases), {_fmt(summary.default_coverage)} (default band)"
        )
    console.print(f"wrote {md} and {page}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def register(app: typer.Typer) -> None:
    """Add ``bench`` to ``app``."""
    app.command("bench")(bench_cmd)
