"""The options of the plan search, shared by ``plan`` and ``tune`` (typer annotations only: the
search itself is :mod:`hetplan.usecases.plan`'s)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hetplan.cli.help_text import DTYPE_HELP

ModelOpt = Annotated[str, typer.Option("--model", help="Zoo name, file.py:fn or pkg.mod:fn.")]
ClusterOpt = Annotated[Path, typer.Option("--cluster", help="Cluster file (YAML or JSON).")]
DatasetOpt = Annotated[str | None, typer.Option(help="mnist, cifar10, imagenet, highres.")]
ObjectiveOpt = Annotated[
    str, typer.Option(help="time|throughput|power|energy|edp|cost or a mix time=0.7,energy=0.3")
]
BatchOpt = Annotated[int, typer.Option(help="Global batch (samples per iteration).")]
OptimizerOpt = Annotated[str, typer.Option(help="sgd, momentum or adam.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help=DTYPE_HELP)]
SizeOpt = Annotated[int | None, typer.Option(help="Samples per epoch.")]
PowerOpt = Annotated[float | None, typer.Option(help="Limit: cluster power, W.")]
DevicesOpt = Annotated[int | None, typer.Option(help="Limit: devices used.")]
MinDevicesOpt = Annotated[int | None, typer.Option(help="Limit: at least this many devices used.")]
AllDevicesOpt = Annotated[
    bool, typer.Option("--all-devices", help="Use every device of the cluster.")
]
DeadlineOpt = Annotated[float | None, typer.Option(help="Limit: epoch time, s.")]
BudgetOpt = Annotated[float | None, typer.Option(help="Limit: dollars per epoch.")]
ProfilesOpt = Annotated[Path | None, typer.Option(help="Profile store directory.")]
AnalyticalOpt = Annotated[bool, typer.Option("--analytical", help="Ignore measured profiles.")]
TimeLimitOpt = Annotated[
    float | None,
    typer.Option(
        help="Stop the search after this many seconds and keep the best plan found so far "
        "(the output says what was cut short).",
    ),
]
HtmlOpt = Annotated[
    Path | None,
    typer.Option(help="Also write a self-contained page: Gantt chart, memory, Pareto front."),
]
AsynchronousOpt = Annotated[
    bool,
    typer.Option(
        "--asynchronous",
        help="Also plan asynchronous families (PipeDream, WSP hybrid, async PS): their stale "
        "weights may need more iterations to converge, which is not modelled. Default: "
        "synchronous plans only, unless --strategies names an asynchronous family.",
    ),
]
SyncOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--sync-only",
        hidden=True,
        help="Kept for old scripts: synchronous plans are the default (see --asynchronous).",
    ),
]
