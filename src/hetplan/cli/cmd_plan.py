"""``hetplan plan``: search the best plan for an objective and write it to a plan file."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hetplan.cli.output import console, print_json
from hetplan.cli.paths import check_input_dir, check_output
from hetplan.cli.search_options import (
    AllDevicesOpt,
    AnalyticalOpt,
    AsynchronousOpt,
    BatchOpt,
    BudgetOpt,
    ClusterOpt,
    DatasetOpt,
    DeadlineOpt,
    DevicesOpt,
    DtypeOpt,
    HtmlOpt,
    MinDevicesOpt,
    ModelOpt,
    ObjectiveOpt,
    OptimizerOpt,
    PowerOpt,
    ProfilesOpt,
    SizeOpt,
    SyncOnlyOpt,
    TimeLimitOpt,
)
from hetplan.cli.status import Terminal

if TYPE_CHECKING:
    from hetplan.usecases.plan import SearchRequest

# The flow (search, tracer, profiles: numpy and torch) loads inside the command: `hetplan
# --help` stays quick.
# ruff: noqa: PLC0415


def plan_cmd(
    model: ModelOpt,
    cluster: ClusterOpt,
    dataset: DatasetOpt = None,
    objective: ObjectiveOpt = "time",
    batch: BatchOpt = 256,
    top: Annotated[int, typer.Option(help="Rows in the ranked table.")] = 10,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            help="Every column of the ranked table: staleness, power, EDP and price too "
            "(about 160 columns wide; the default fits 100).",
        ),
    ] = False,
    out: Annotated[Path, typer.Option(help="Where to write the best plan.")] = Path("plan.json"),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    strategies: Annotated[str | None, typer.Option(help="Families to search (comma list).")] = None,
    optimizer: OptimizerOpt = "sgd",
    dtype: DtypeOpt = "fp32",
    dataset_size: SizeOpt = None,
    max_power: PowerOpt = None,
    max_devices: DevicesOpt = None,
    min_devices: MinDevicesOpt = None,
    all_devices: AllDevicesOpt = False,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    profiles: ProfilesOpt = None,
    analytical: AnalyticalOpt = False,
    html: HtmlOpt = None,
    what_if: Annotated[
        bool,
        typer.Option(
            "--what-if",
            help="Also rank plans train cannot run (e.g. micro-batches that do not divide a "
            "replica's batch): priced and simulated only.",
        ),
    ] = False,
    asynchronous: AsynchronousOpt = False,
    sync_only: SyncOnlyOpt = False,
    time_limit: TimeLimitOpt = None,
) -> None:
    """Search the best way to train MODEL on CLUSTER; print the ranking, write the winner."""
    from hetplan.cli.plan_view import print_ranking, ranking_json
    from hetplan.schedule.builder import paused_gc
    from hetplan.usecases.plan import SearchRequest, make_plan

    check_output(out, "--out")
    if html is not None:
        check_output(html, "--html")
    check_input_dir(profiles, "--profiles")
    req = SearchRequest(
        model=model, cluster=cluster, dataset=dataset, objective=objective, batch=batch,
        optimizer=optimizer, dtype=dtype, dataset_size=dataset_size, max_power=max_power,
        max_devices=max_devices, min_devices=min_devices, all_devices=all_devices,
        deadline=deadline, budget=budget, profiles=profiles, analytical=analytical,
        strategies=strategies, what_if=what_if, asynchronous=asynchronous, sync_only=sync_only,
        time_limit=time_limit,
    )  # fmt: skip
    # The search keeps millions of objects (every finalist's timeline) and makes almost no
    # cycles: the collector would rescan them after the search, while the plan is written
    # and while the ranking is printed (seconds for thousands of devices); paused, it scans
    # what is left once, when the command ends.
    with paused_gc():
        found = make_plan(req, out, html, Terminal(quiet=as_json))
        if as_json:
            print_json(ranking_json(found.ranking, found.seconds) | {"plan_file": str(out)})
            return
        print_ranking(found.ranking, top, found.seconds, wide=wide, tune=_tune_command(req))
    console.print(f"wrote {out}" + ("" if html is None else f" and {html}"))


def register(app: typer.Typer) -> None:
    """Add ``plan`` to ``app``."""
    app.command("plan")(plan_cmd)


def _tune_command(req: SearchRequest) -> str:
    """The ``hetplan tune`` that searches what this ``plan`` searched (without ``--top``)."""
    args = ["hetplan", "tune", "--model", req.model, "--cluster", str(req.cluster)]
    args += ["--batch", str(req.batch), "--objective", req.objective]
    for flag, value in (
        ("--dataset", req.dataset), ("--dtype", req.dtype), ("--strategies", req.strategies),
        ("--profiles", req.profiles), ("--optimizer", req.optimizer),
    ):  # fmt: skip
        if value is not None:
            args += [flag, str(value)]
    return shlex.join(args)
