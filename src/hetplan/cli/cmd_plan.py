"""``hetplan plan``: search the best plan for an objective and write it to a plan file."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from hetplan.cli.help_text import DTYPE_HELP
from hetplan.cli.output import console, print_json
from hetplan.cli.page import write_ranking_page
from hetplan.cli.paths import check_output
from hetplan.cli.status import working
from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.plan import explain
from hetplan.plan.objective import Limits, Objective, pareto_front, parse_objective
from hetplan.plan.options import FAMILIES, RUNNABLE, SearchOptions, check_batch
from hetplan.plan.staleness import ASYNCHRONOUS_FAMILIES, is_asynchronous
from hetplan.plan.stamp import stamped
from hetplan.planspec import ModelRef
from hetplan.serde import to_data, write_json_atomic

# The search, tracer and profiles (torch) load inside the functions that use them:
# `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.plan.search import Ranking


def _families(text: str | None, what_if: bool, sync_only: bool = False) -> tuple[str, ...]:
    if text is None:
        default = FAMILIES if what_if else RUNNABLE
        return tuple(n for n in default if not (sync_only and n in ASYNCHRONOUS_FAMILIES))
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in FAMILIES]
    if bad or not names:
        raise InputError(f"--strategies: unknown {bad or text!r}; expected some of {FAMILIES}")
    stale = [n for n in names if n in ASYNCHRONOUS_FAMILIES]
    if stale and sync_only:
        raise InputError(
            f"--sync-only excludes asynchronous plans, but --strategies asks for "
            f"{', '.join(stale)}; drop one of the two options"
        )
    unrunnable = [n for n in names if n not in RUNNABLE]
    if unrunnable and not what_if:
        raise InputError(
            f"--strategies: {', '.join(unrunnable)} cannot be run by hetplan train yet; "
            f"add --what-if to price it anyway (runnable: {', '.join(RUNNABLE)})"
        )
    return names


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
SyncOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--sync-only",
        help="Leave out asynchronous plans (PipeDream, WSP hybrid, async PS): their stale "
        "weights may need more iterations to converge, which is not modelled.",
    ),
]


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    """The plan search as the command line asks for it (shared by ``plan`` and ``tune``)."""

    model: str
    cluster: Path
    dataset: str | None = None
    objective: str = "time"
    batch: int = 256
    optimizer: str = "sgd"
    dtype: str = "fp32"
    dataset_size: int | None = None
    max_power: float | None = None
    max_devices: int | None = None
    min_devices: int | None = None
    all_devices: bool = False
    deadline: float | None = None
    budget: float | None = None
    profiles: Path | None = None
    analytical: bool = False
    strategies: str | None = None
    what_if: bool = False
    sync_only: bool = False
    time_limit: float | None = None

    def options(self, cluster: Cluster) -> SearchOptions:
        """The search's options; the limits checked against ``cluster``."""
        from hetplan.predict import DATASET_SIZES

        check_batch(self.batch)
        self._check_limits(len(cluster.devices))
        check_prices(parse_objective(self.objective), self.budget, cluster)
        size = self.dataset_size
        if size is None:
            size = DATASET_SIZES.get(self.dataset or "")
        return SearchOptions(
            batch=self.batch,
            objective=parse_objective(self.objective),
            limits=Limits(
                max_power_w=self.max_power,
                max_devices=self.max_devices,
                min_devices=len(cluster.devices) if self.all_devices else self.min_devices,
                deadline_s=self.deadline,
                budget_usd=self.budget,
            ),
            optimizer=self.optimizer,
            families=_families(self.strategies, self.what_if, self.sync_only),
            runnable_only=not self.what_if,
            dataset_size=size,
            time_limit_s=self.time_limit,
        )

    def _check_limits(self, devices: int) -> None:
        """Each limit names its option when it cannot be met by any plan (not a search)."""
        if self.max_devices is not None and self.max_devices < 1:
            raise InputError(f"--max-devices must be >= 1 (got {self.max_devices})")
        if self.min_devices is not None:
            if self.all_devices:
                raise InputError("--min-devices and --all-devices: give one of the two")
            if not 1 <= self.min_devices <= devices:
                raise InputError(
                    f"--min-devices must be between 1 and the cluster's {devices} devices "
                    f"(got {self.min_devices})"
                )
        least = devices if self.all_devices else self.min_devices
        if least is not None and self.max_devices is not None and least > self.max_devices:
            raise InputError(
                f"--max-devices {self.max_devices} is below the {least} devices asked for by "
                f"{'--all-devices' if self.all_devices else '--min-devices'}"
            )
        if least is not None and least > self.batch:
            raise InputError(
                f"--batch {self.batch} is smaller than the {least} devices asked for: every "
                "device needs at least one sample"
            )
        positive = {
            "--max-power": self.max_power,
            "--deadline": self.deadline,
            "--budget": self.budget,
        }
        for option, value in positive.items():
            if value is not None and not value > 0:
                raise InputError(f"{option} must be > 0 (got {value:g})")
        if self.time_limit is not None and not self.time_limit >= 0:
            raise InputError(f"--time-limit must be >= 0 seconds (got {self.time_limit:g})")


def check_prices(objective: Objective, budget: float | None, cluster: Cluster) -> None:
    """A cost objective or a budget needs prices: InputError when no device has one."""
    wants = [f"--objective {objective.name}"] if "cost" in objective.weights else []
    wants += ["--budget"] if budget is not None else []
    if wants and all(d.type.price_per_hour is None for d in cluster.devices):
        types = sorted({d.type.name for d in cluster.devices})
        raise InputError(
            f"{' and '.join(wants)} need prices, but no device of cluster {cluster.name!r} "
            f"has one ({', '.join(types)}): set price_per_hour (USD per hour) under the "
            "cluster file's device_types"
        )


def run_search(req: SearchRequest, quiet: bool) -> tuple[Ranking, Cluster, SearchOptions, float]:
    """(ranking, cluster, options, seconds) of the search ``req``; InputError without a plan."""
    from hetplan.graph import build_graph
    from hetplan.plan.search import search
    from hetplan.predict.build import parse_dtype
    from hetplan.profile.select import compute_model
    from hetplan.run.power_profile import with_power_fits

    ref = ModelRef(name=req.model, dataset=req.dataset, dtype=parse_dtype(req.dtype))
    clus = load_cluster(req.cluster)
    opts = req.options(clus)
    if not req.analytical:
        clus, _ = with_power_fits(clus, req.profiles)
    with working(f"tracing {ref.name}", quiet=quiet):
        graph = build_graph(ref)
    compute = compute_model(ref.dtype, directory=req.profiles, measured=not req.analytical)
    start = time.perf_counter()
    status = Console(stderr=True, highlight=False)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=status,
        transient=True,
        disable=quiet or not status.is_terminal,
    ) as bar:
        task = bar.add_task("searching", total=None)

        def progress(phase: str, done: int, total: int, /, *, best: str = "") -> None:
            text = f"{phase}, best so far {best}" if best else phase
            bar.update(task, description=text, completed=done, total=total or None)

        ranking = search(ref, graph, clus, compute, opts, progress)
    seconds = time.perf_counter() - start
    if req.sync_only:
        ranking = without_asynchronous(ranking, clus)
    if not ranking.ranked:
        reasons = ", ".join(f"{k} ({v})" for k, v in ranking.rejected.items()) or "none"
        raise InputError(f"no feasible plan for {req.model} on {req.cluster}; rejected: {reasons}")
    return ranking, clus, opts, seconds


def without_asynchronous(ranking: Ranking, cluster: Cluster) -> Ranking:
    """``ranking`` without its asynchronous plans, counted as rejected. The search is asked
    for synchronous families only, but hybrid and ps plans are asynchronous by their fields
    (WSP, async PS), not by family; the search makes none today, this keeps it so."""
    keep = [r for r in ranking.ranked if not is_asynchronous(r.candidate.plan)]
    dropped = len(ranking.ranked) - len(keep)
    if not dropped:
        return ranking
    rejected = ranking.rejected.copy()
    rejected["asynchronous (--sync-only)"] += dropped
    front = pareto_front([(r.metrics.time_s, r.metrics.energy_j) for r in keep])
    out = dataclasses.replace(
        ranking, ranked=keep, rejected=rejected, pareto=[keep[i] for i in front]
    )
    out.reasons = explain.reasons(out, cluster)
    return out


def plan_cmd(
    model: ModelOpt,
    cluster: ClusterOpt,
    dataset: DatasetOpt = None,
    objective: ObjectiveOpt = "time",
    batch: BatchOpt = 256,
    top: Annotated[int, typer.Option(help="Rows in the ranked table.")] = 10,
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
    sync_only: SyncOnlyOpt = False,
    time_limit: TimeLimitOpt = None,
) -> None:
    """Search the best way to train MODEL on CLUSTER; print the ranking, write the winner."""
    from hetplan.cli.plan_view import print_ranking, ranking_json

    check_output(out, "--out")
    if html is not None:
        check_output(html, "--html")
    req = SearchRequest(
        model=model, cluster=cluster, dataset=dataset, objective=objective, batch=batch,
        optimizer=optimizer, dtype=dtype, dataset_size=dataset_size, max_power=max_power,
        max_devices=max_devices, min_devices=min_devices, all_devices=all_devices,
        deadline=deadline, budget=budget, profiles=profiles, analytical=analytical,
        strategies=strategies, what_if=what_if, sync_only=sync_only, time_limit=time_limit,
    )  # fmt: skip
    ranking, clus, _, seconds = run_search(req, as_json)
    write_json_atomic(out, to_data(stamped(ranking.best.candidate.plan, clus)))
    if html is not None:
        write_ranking_page(html, ranking)
    if as_json:
        print_json(ranking_json(ranking, seconds) | {"plan_file": str(out)})
        return
    print_ranking(ranking, top, seconds)
    console.print(f"wrote {out}" + ("" if html is None else f" and {html}"))


def register(app: typer.Typer) -> None:
    """Add ``plan`` to ``app``."""
    app.command("plan")(plan_cmd)
