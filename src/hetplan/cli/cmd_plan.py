"""``hetplan plan``: search the best plan for an objective and write it to a plan file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn

from hetplan.cli.output import console, print_json
from hetplan.cli.plan_view import print_ranking, ranking_json
from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.graph import build_graph
from hetplan.plan.objective import Limits, parse_objective
from hetplan.plan.options import FAMILIES, RUNNABLE, SearchOptions
from hetplan.plan.search import search
from hetplan.plan.types import ModelRef
from hetplan.predict import DATASET_SIZES
from hetplan.predict.build import DTYPE_HELP, parse_dtype
from hetplan.profile.select import compute_model
from hetplan.serde import to_data, write_json_atomic


def _families(text: str | None, what_if: bool) -> tuple[str, ...]:
    if text is None:
        return FAMILIES if what_if else RUNNABLE
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in FAMILIES]
    if bad or not names:
        raise InputError(f"--strategies: unknown {bad or text!r}; expected some of {FAMILIES}")
    unrunnable = [n for n in names if n not in RUNNABLE]
    if unrunnable and not what_if:
        raise InputError(
            f"--strategies: {', '.join(unrunnable)} cannot be run by hetplan train yet; "
            f"add --what-if to price it anyway (runnable: {', '.join(RUNNABLE)})"
        )
    return names


def plan_cmd(
    model: Annotated[str, typer.Option("--model", help="Zoo name, file.py:fn or pkg.mod:fn.")],
    cluster: Annotated[Path, typer.Option("--cluster", help="Cluster file (YAML or JSON).")],
    dataset: Annotated[str | None, typer.Option(help="mnist, cifar10, imagenet, highres.")] = None,
    objective: Annotated[
        str, typer.Option(help="time|throughput|power|energy|edp|cost or a mix time=0.7,energy=0.3")
    ] = "time",
    batch: Annotated[int, typer.Option(help="Global batch (samples per iteration).")] = 256,
    top: Annotated[int, typer.Option(help="Rows in the ranked table.")] = 10,
    out: Annotated[Path, typer.Option(help="Where to write the best plan.")] = Path("plan.json"),
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    strategies: Annotated[str | None, typer.Option(help="Families to search (comma list).")] = None,
    optimizer: Annotated[str, typer.Option(help="sgd, momentum or adam.")] = "sgd",
    dtype: Annotated[str, typer.Option("--dtype", help=DTYPE_HELP)] = "fp32",
    dataset_size: Annotated[int | None, typer.Option(help="Samples per epoch.")] = None,
    max_power: Annotated[float | None, typer.Option(help="Limit: cluster power, W.")] = None,
    max_devices: Annotated[int | None, typer.Option(help="Limit: devices used.")] = None,
    deadline: Annotated[float | None, typer.Option(help="Limit: epoch time, s.")] = None,
    budget: Annotated[float | None, typer.Option(help="Limit: dollars per epoch.")] = None,
    profiles: Annotated[Path | None, typer.Option(help="Profile store directory.")] = None,
    analytical: Annotated[
        bool, typer.Option("--analytical", help="Ignore measured profiles.")
    ] = False,
    what_if: Annotated[
        bool,
        typer.Option(
            "--what-if",
            help="Also rank families train cannot run yet (ps, pipedream, tensor parallel): "
            "priced and simulated only.",
        ),
    ] = False,
) -> None:
    """Search the best way to train MODEL on CLUSTER; print the ranking, write the winner."""
    if batch < 1:
        raise InputError(f"--batch must be >= 1 (got {batch})")
    ref = ModelRef(name=model, dataset=dataset, dtype=parse_dtype(dtype))
    clus = load_cluster(cluster)
    graph = build_graph(ref)
    size = dataset_size if dataset_size is not None else DATASET_SIZES.get(dataset or "")
    opts = SearchOptions(
        batch=batch,
        objective=parse_objective(objective),
        limits=Limits(
            max_power_w=max_power, max_devices=max_devices, deadline_s=deadline, budget_usd=budget
        ),
        optimizer=optimizer,
        families=_families(strategies, what_if),
        runnable_only=not what_if,
        dataset_size=size,
    )
    compute = compute_model(ref.dtype, directory=profiles, measured=not analytical)
    start = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        console=console,
        transient=True,
        disable=as_json or not console.is_terminal,
    ) as bar:
        task = bar.add_task("searching", total=None)

        def progress(phase: str, done: int, total: int) -> None:
            bar.update(task, description=phase, completed=done, total=total)

        ranking = search(ref, graph, clus, compute, opts, progress)
    seconds = time.perf_counter() - start
    if not ranking.ranked:
        reasons = ", ".join(f"{k} ({v})" for k, v in ranking.rejected.items()) or "none"
        raise InputError(f"no feasible plan for {model} on {cluster}; rejected: {reasons}")
    write_json_atomic(out, to_data(ranking.best.candidate.plan))
    if as_json:
        print_json(ranking_json(ranking, seconds) | {"plan_file": str(out)})
        return
    print_ranking(ranking, top, seconds)
    console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add ``plan`` to ``app``."""
    app.command("plan")(plan_cmd)
