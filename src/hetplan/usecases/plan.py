"""Planning: the search a command line asks for (``plan``, and ``tune``'s candidates), and its
winner written as a plan file.

The request's limits are checked before any work, each naming its option; the search reads
measured profiles and power fits unless ``analytical`` (no torch: only tracing the model needs
it).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from hetplan import graph
from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.plan import explain
from hetplan.plan.objective import Limits, Objective, pareto_front, parse_objective
from hetplan.plan.options import FAMILIES, RUNNABLE, SearchOptions, check_batch
from hetplan.plan.search import Ranked, Ranking, search
from hetplan.plan.staleness import ASYNCHRONOUS_FAMILIES, is_asynchronous
from hetplan.plan.stamp import stamped
from hetplan.planspec import ModelRef
from hetplan.predict import DATASET_SIZES
from hetplan.predict.build import parse_dtype
from hetplan.predict.error_bars import ErrorModel, with_interval
from hetplan.profile.power_store import with_power_fits
from hetplan.profile.select import compute_model
from hetplan.profile.store import profile_dir
from hetplan.serde import to_data, write_json_atomic
from hetplan.usecases.feedback import SILENT, Feedback
from hetplan.usecases.pages import write_ranking_page


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
    asynchronous: bool = False
    """Plan asynchronous families too (PipeDream, WSP hybrid, async PS); without it they are
    planned only where ``strategies`` names one (issue 27: synchronous unless asked)."""
    sync_only: bool = False
    """``--sync-only`` (the default now, kept for old scripts): refuses asynchronous families
    named in ``strategies`` and ``asynchronous``."""
    time_limit: float | None = None

    def options(self, cluster: Cluster) -> SearchOptions:
        """The search's options; the limits checked against ``cluster``."""
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
            families=_families(self.strategies, self.what_if, asks_asynchronous(self)),
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
        self._check_positive()

    def _check_positive(self) -> None:
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


def _families(text: str | None, what_if: bool, asynchronous: bool = False) -> tuple[str, ...]:
    """The strategy families to search: ``--strategies`` (an asynchronous family named there
    is asked for), else every runnable one (every one with ``what_if``), the asynchronous
    ones only with ``asynchronous``."""
    if text is None:
        default = FAMILIES if what_if else RUNNABLE
        return tuple(n for n in default if asynchronous or n not in ASYNCHRONOUS_FAMILIES)
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


def asks_asynchronous(req: SearchRequest) -> bool:
    """Whether asynchronous plans were asked for: ``--asynchronous``, or an asynchronous
    family named in ``--strategies``; InputError when ``--sync-only`` says otherwise."""
    names = {x.strip() for x in (req.strategies or "").split(",")}
    stale = sorted(names & set(ASYNCHRONOUS_FAMILIES))
    if req.sync_only and (stale or req.asynchronous):
        asked = f"--strategies asks for {', '.join(stale)}" if stale else "--asynchronous"
        raise InputError(
            f"--sync-only excludes asynchronous plans, but {asked}; drop one of the two options"
        )
    return req.asynchronous or bool(stale)


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


@dataclass(frozen=True, kw_only=True)
class Searched:
    """A search's outcome: the ranking, the cluster it priced (power fits applied), the
    options it ran with, and its wall-clock seconds."""

    ranking: Ranking
    cluster: Cluster
    options: SearchOptions
    seconds: float


def search_plans(req: SearchRequest, feedback: Feedback = SILENT) -> Searched:
    """Rank the plans ``req`` asks for; InputError when no plan is feasible. The cluster,
    the options and the profile store are read before the model is traced (seconds), so that
    a bad one is refused at once."""
    ref = ModelRef(name=req.model, dataset=req.dataset, dtype=parse_dtype(req.dtype))
    clus = load_cluster(req.cluster)
    opts = req.options(clus)
    if not req.analytical:
        clus, _ = with_power_fits(clus, req.profiles)
    compute = compute_model(ref.dtype, directory=req.profiles, measured=not req.analytical)
    with feedback.phase(f"tracing {ref.name}"):
        model = graph.build_graph(ref)
    start = time.perf_counter()
    with feedback.search() as progress:
        ranking = search(ref, model, clus, compute, opts, progress)
    seconds = time.perf_counter() - start
    if not asks_asynchronous(req):
        ranking = without_asynchronous(ranking, clus)
    if not ranking.ranked:
        reasons = ", ".join(f"{k} ({v})" for k, v in ranking.rejected.items()) or "none"
        raise InputError(f"no feasible plan for {req.model} on {req.cluster}; rejected: {reasons}")
    ranking = with_intervals(ranking, ErrorModel.load(profile_dir(req.profiles)))
    return Searched(ranking=ranking, cluster=clus, options=opts, seconds=seconds)


def with_intervals(ranking: Ranking, model: ErrorModel) -> Ranking:
    """Every ranked plan's and baseline's prediction with its interval
    (:mod:`hetplan.predict.error_bars`); the Pareto front keeps pointing at the same plans."""
    done: dict[int, Ranked] = {}

    def one(r: Ranked) -> Ranked:
        if id(r) not in done:
            pred = with_interval(r.prediction, model)
            done[id(r)] = dataclasses.replace(r, prediction=pred)
        return done[id(r)]

    return dataclasses.replace(
        ranking,
        ranked=[one(r) for r in ranking.ranked],
        baselines={k: one(v) for k, v in ranking.baselines.items()},
        pareto=[one(r) for r in ranking.pareto],
    )


def without_asynchronous(ranking: Ranking, cluster: Cluster) -> Ranking:
    """``ranking`` without its asynchronous plans, counted as rejected. The search is asked
    for synchronous families only, but hybrid and ps plans are asynchronous by their fields
    (WSP, async PS), not by family; the search makes none today, this keeps it so."""
    keep = [r for r in ranking.ranked if not is_asynchronous(r.candidate.plan)]
    dropped = len(ranking.ranked) - len(keep)
    if not dropped:
        return ranking
    rejected = ranking.rejected.copy()
    rejected["asynchronous (add --asynchronous)"] += dropped
    front = pareto_front([(r.metrics.time_s, r.metrics.energy_j) for r in keep])
    out = dataclasses.replace(
        ranking, ranked=keep, rejected=rejected, pareto=[keep[i] for i in front]
    )
    out.reasons = explain.reasons(out, cluster)
    return out


def make_plan(
    req: SearchRequest, out: Path, html: Path | None = None, feedback: Feedback = SILENT
) -> Searched:
    """Search, then write the best plan (stamped with the cluster) to ``out`` and, with
    ``html``, its page with every ranked candidate's time and energy."""
    found = search_plans(req, feedback)
    write_json_atomic(out, to_data(stamped(found.ranking.best.candidate.plan, found.cluster)))
    if html is not None:
        write_ranking_page(html, found.ranking)
    return found
