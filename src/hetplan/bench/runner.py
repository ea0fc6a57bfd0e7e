"""Run the suite: profile each model once, then for every cluster and strategy build the plan,
predict it with the measured compute model, and measure it for real with the runtime (every
plan of a cluster once per round, the rounds interleaved: :mod:`hetplan.bench.rounds`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hetplan.bench.machine import machine_info
from hetplan.bench.plans import fixed_plan, plan_label, planner_pick
from hetplan.bench.rounds import Merged, Pending, measure_rounds, merge
from hetplan.bench.suite import (
    HETEROGENEOUS,
    TP_DEGREE,
    BenchModel,
    SuiteConfig,
    cluster_path,
    strategies,
)
from hetplan.bench.types import (
    PLANNER,
    CaseResult,
    ParetoPoint,
    PlannerTiming,
    RankMemory,
    SuiteResult,
)
from hetplan.cluster import Cluster, load_cluster
from hetplan.cost.types import ComputeModel
from hetplan.graph import build_graph
from hetplan.graph.types import OP_CLASSES, ModelGraph
from hetplan.planspec import ModelRef, Plan
from hetplan.planspec.trace import COMPUTE_KINDS, Span
from hetplan.predict import Prediction, predict
from hetplan.predict.error_bars import append_record, record_of
from hetplan.profile.calib_store import calibration_path, save_calibration
from hetplan.profile.calibrate import calibrate
from hetplan.profile.merge import merge_profiles
from hetplan.profile.model import CPU_TYPE, ProfileRequest, profile_model, torch_device
from hetplan.profile.select import compute_model
from hetplan.profile.store import find_profile, save_profile
from hetplan.profile.store import profile_dir as profile_store
from hetplan.profile.timing import thread_scope
from hetplan.run.measurement.measure import Measurement, with_predicted_memory
from hetplan.serde import to_data

Progress = Callable[[str], None]
PROFILE_CPUS = (0,)
"""The profile is taken alone on one pinned core with one thread: a speed-1 rank's setting."""


def profile_sizes(batch: int) -> tuple[int, ...]:
    """Batch sizes to profile: powers of two up to ``batch``, and ``batch`` (every micro-batch
    size the suite's plans use lies in that range; the profile fits ``a + k*b`` between)."""
    sizes = {batch}
    b = 1
    while b < batch:
        sizes.add(b)
        b *= 2
    return tuple(sorted(sizes))


def ensure_profile(
    model: BenchModel, graph: ModelGraph, steps: int, directory: Path | None
) -> bool:
    """Profile ``model`` into the store unless a matching profile is there; True if it ran."""
    sizes = profile_sizes(model.batch)
    found = find_profile(
        CPU_TYPE, graph.name, graph.input_shape, graph.dtype, batch_sizes=sizes,
        directory=directory,
    )  # fmt: skip
    if found is not None:
        return False
    save_profile(profile_model(_request(model, steps)), directory)
    return True


def _request(model: BenchModel, steps: int) -> ProfileRequest:
    return ProfileRequest(
        model=model.name, dataset=model.dataset, batch=model.batch,
        batch_sizes=profile_sizes(model.batch), cpus=PROFILE_CPUS, threads=len(PROFILE_CPUS),
        steps=steps,
    )  # fmt: skip


def ensure_calibration(dtype: str, directory: Path | None) -> bool:
    """Calibrate this CPU (one pinned core, one thread: the profiles' setting) into the store
    unless it holds a calibration of ``cpu`` in ``dtype``; True if it ran."""
    if calibration_path(CPU_TYPE, dtype, directory).is_file():
        return False
    with thread_scope(len(PROFILE_CPUS), PROFILE_CPUS):
        cal = calibrate(CPU_TYPE, torch_device("cpu"), dtype, OP_CLASSES)
    save_calibration(cal, directory)
    return True


@dataclass(frozen=True)
class Models:
    """The suite's two compute models: per-layer profiles, and the calibrated analytical one."""

    measured: ComputeModel
    analytical: ComputeModel
    store: Path
    """The profile store: each measured case's error is added to its history
    (:mod:`hetplan.predict.error_bars`)."""


def run_suite(
    config: SuiteConfig,
    *,
    profile_dir: Path | None = None,
    progress: Progress | None = None,
    planner_sizes: tuple[int, ...] = (),
) -> SuiteResult:
    """Run every case of ``config``; a case the runtime cannot run is noted and skipped."""
    say = progress or (lambda _msg: None)
    result = SuiteResult(
        quick=False, steps=config.steps, warmup=config.warmup, rounds=config.rounds, cases=[],
        machine=machine_info("before"),
    )  # fmt: skip
    store = profile_store(profile_dir)
    for model in config.models:
        ref = ModelRef(name=model.name, dataset=model.dataset)
        graph = build_graph(ref)
        fresh = _profile(model, graph, config, profile_dir)
        if fresh:
            say(f"{model.key}: profiled on core {PROFILE_CPUS[0]}")
        if ensure_calibration(graph.dtype, profile_dir):
            say(f"{CPU_TYPE}: calibrated on core {PROFILE_CPUS[0]}")
        done: list[tuple[Cluster, list[Pending]]] = []
        for i, name in enumerate(config.clusters):
            if fresh and i > 0:
                _profile_again(model, graph, config, profile_dir, say)
            compute = compute_model(graph.dtype, directory=profile_dir)
            cluster = load_cluster(cluster_path(name, config.cluster_dir))
            done.append(
                (cluster, _run_cluster(result, config, model, ref, graph, cluster, compute, say))
            )
        if fresh and done:
            _profile_again(model, graph, config, profile_dir, say)
        compute = compute_model(graph.dtype, directory=profile_dir)
        analytical = compute_model(graph.dtype, directory=profile_dir, measured=False)
        models = Models(measured=compute, analytical=analytical, store=store)
        for cluster, pending in done:
            _price_cluster(result, model.key, graph, cluster, models, pending)
        for n in planner_sizes:
            result.planner_timings.append(_time_planner(model, ref, graph, n, compute))
    result.machine.update(machine_info("after"))
    return result


def _profile(
    model: BenchModel, graph: ModelGraph, config: SuiteConfig, directory: Path | None
) -> bool:
    return ensure_profile(model, graph, config.profile_steps, directory)


def _profile_again(
    model: BenchModel,
    graph: ModelGraph,
    config: SuiteConfig,
    directory: Path | None,
    say: Progress,
) -> None:
    """Profile ``model`` once more and merge it into the suite's profile
    (:func:`hetplan.profile.merge.merge_profiles`): the machine's speed drifts by up to 1.8x
    over minutes, and one snapshot would price every case of the model (docs/benchmarks.md)."""
    sizes = profile_sizes(model.batch)
    old = find_profile(
        CPU_TYPE, graph.name, graph.input_shape, graph.dtype, batch_sizes=sizes,
        directory=directory,
    )  # fmt: skip
    new = profile_model(_request(model, config.profile_steps))
    save_profile(new if old is None else merge_profiles(old, new), directory)
    runs = 1 if old is None else len(old.history or old.batches) // len(sizes) + 1
    say(f"{model.key}: profiled again on core {PROFILE_CPUS[0]} ({runs} runs merged)")


def _run_cluster(
    result: SuiteResult,
    config: SuiteConfig,
    model: BenchModel,
    ref: ModelRef,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    say: Progress,
) -> list[Pending]:
    """Plan (the fixed strategies and the planner's pick, searched on ``compute``) and measure
    every case of one cluster; priced later (:func:`_price_cluster`)."""
    name = cluster.name or "cluster"
    tensor_parallel = any(
        layer.tp_split % TP_DEGREE == 0 and layer.tp_split for layer in graph.layers
    )
    pending = []
    for strategy in strategies(len(cluster.devices), tensor_parallel):
        if config.only is not None and strategy not in config.only:
            continue
        plan = fixed_plan(strategy, graph, cluster, ref, model.batch)
        pending.append(Pending(strategy=strategy, plan=plan, label=plan_label(plan)))
    pick = planner_pick(ref, graph, cluster, compute, model.batch)
    result.planner_timings.append(
        PlannerTiming(
            model=model.key, layers=len(graph.layers), devices=len(cluster.devices),
            seconds=pick.search_s, candidates=pick.ranking.screened,
        )
    )  # fmt: skip
    if _better_pareto(result, name, len(pick.ranking.ranked)):
        result.pareto_model = f"{model.key} on {name}"
        front = {id(r) for r in pick.ranking.pareto}
        result.pareto = [
            ParetoPoint(
                time_s=r.metrics.time_s, energy_j=r.metrics.energy_j,
                label=r.candidate.label, on_front=id(r) in front,
            )
            for r in pick.ranking.ranked
        ]  # fmt: skip
    result.notes.extend(f"{model.key} on {name}: {n}" for n in pick.notes)
    if pick.plan is not None and (config.only is None or PLANNER in config.only):
        label = f"planner's pick {plan_label(pick.plan)}"
        pending.append(
            Pending(strategy=PLANNER, plan=pick.plan, label=label, search_s=pick.search_s)
        )
    measure_rounds(
        pending, cluster, rounds=config.rounds, steps=config.steps, warmup=config.warmup,
        say=lambda msg: say(f"{model.key} on {name}: {msg}"),
    )  # fmt: skip
    return pending


def _price_cluster(
    result: SuiteResult,
    model_key: str,
    graph: ModelGraph,
    cluster: Cluster,
    models: Models,
    pending: list[Pending],
) -> None:
    """The measured cases of one cluster, priced with ``models`` (a failed one as a note)."""
    for p in pending:
        if p.failure is not None:
            result.notes.append(
                f"{model_key} on {cluster.name} {p.strategy}: run failed: {p.failure}"
            )
            continue
        case = case_of(p.plan, graph, cluster, models, model_key, p.strategy, merge(p.runs))
        if p.strategy == PLANNER:
            case.planner_strategy = p.plan.strategy
            case.search_s = p.search_s
        result.cases.append(case)


def _better_pareto(result: SuiteResult, cluster: str, candidates: int) -> bool:
    """Whether this search's candidates should be the report's Pareto figure: the
    heterogeneous cluster's search with the most ranked candidates (the richest front)."""
    if not result.pareto:
        return True
    here = cluster == HETEROGENEOUS
    shown = result.pareto_model.endswith(f" on {HETEROGENEOUS}")
    return (here and not shown) or (here == shown and candidates > len(result.pareto))


def case_of(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    models: Models,
    model_key: str,
    strategy: str,
    measured: Merged,
) -> CaseResult:
    """Predict ``plan`` (with profiles, and without) against its measured rounds, and add
    its error to the store's history."""
    prediction = predict(plan, graph, cluster, models.measured)
    analytical = predict(plan, graph, cluster, models.analytical)
    with contextlib.suppress(OSError):  # a read-only store: the suite's result stands
        append_record(models.store, record_of(prediction, measured.median_s, "bench"))
    simulated = [
        s for s in prediction.timeline.spans()
        if s.kind in COMPUTE_KINDS and s.iteration == 0 and s.device in plan.devices
    ]  # fmt: skip
    return CaseResult(
        model=model_key,
        cluster=cluster.name or "cluster",
        strategy=strategy,
        label=plan_label(plan),
        ranks=len(plan.devices),
        predicted_s=prediction.iteration_time_s,
        measured_s=measured.median_s,
        measured_p10_s=measured.p10_s,
        measured_p90_s=measured.p90_s,
        rounds_s=measured.rounds_s,
        plan=to_data(plan),
        simulated=simulated,
        measured=measured_spans(measured.last),
        memory=rank_memory(measured.last, prediction),
        predicted_analytical_s=analytical.iteration_time_s,
        analytical_source=analytical.cost_source,
    )


def comparable_memory(prediction: Prediction) -> dict[str, float]:
    """Device id -> predicted peak memory less the ``framework`` allowance: that allowance is
    a fixed CUDA context / allocator reserve which the measurement (live tensor bytes on CPU,
    the allocator's peak on CUDA) does not see, so it is left out of the comparison."""
    return {d.id: d.memory_bytes - d.memory.get("framework", 0.0) for d in prediction.devices}


def rank_memory(m: Measurement, prediction: Prediction) -> list[RankMemory]:
    """Per rank: predicted (without the framework allowance) and measured peak memory."""
    m = with_predicted_memory(m, comparable_memory(prediction))
    return [
        RankMemory(rank=r.rank, device=r.device, predicted_bytes=r.predicted_memory_bytes,
                   measured_bytes=r.peak_memory_bytes, source=r.memory_source)
        for r in m.ranks
    ]  # fmt: skip


def measured_spans(m: Measurement) -> list[Span]:
    """The runtime's compute spans of the last timed step, every rank's."""
    return [a for r in m.ranks for a in r.actions if a.kind in COMPUTE_KINDS]


def _time_planner(
    model: BenchModel, ref: ModelRef, graph: ModelGraph, devices: int, compute: ComputeModel
) -> PlannerTiming:
    """Time a search on a homogeneous cluster of ``devices`` CPU cores (no run)."""
    from hetplan.cluster.config import cluster_from_data  # noqa: PLC0415

    data = {
        "name": f"cpu-x{devices}",
        "nodes": [{"name": "n", "devices": [{"type": "cpu", "count": devices}],
                   "link": {"type": "shm"}}],
    }  # fmt: skip
    cluster = cluster_from_data(data, f"<bench cpu-x{devices}>")
    pick = planner_pick(ref, graph, cluster, compute, model.batch, run_check=False)
    return PlannerTiming(
        model=model.key, layers=len(graph.layers), devices=devices, seconds=pick.search_s,
        candidates=pick.ranking.screened,
    )  # fmt: skip
