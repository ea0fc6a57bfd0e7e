"""Training: run a plan on this machine, measure it and set it against the prediction; the
run's power points refit the power model and its stage times go back into the profile store.

:func:`train` returns what the command prints (:class:`TrainReport`); every file it writes
(measurement, step log, Gantt page, power points, written-back profile) is written here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hetplan.bench.runner import comparable_memory
from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError, Interrupted
from hetplan.graph import build_graph
from hetplan.plan.stamp import check_cluster
from hetplan.planspec import Plan
from hetplan.predict.error_bars import ErrorModel, Interval, append_record, record_of
from hetplan.predict.predict import untraced_tp_notes
from hetplan.profile.power_store import PowerRecord, record_power_points, with_power_fits
from hetplan.profile.store import profile_dir
from hetplan.report.gantt import Panel, bars_of, gantt_figure, gantt_page
from hetplan.run.launch.commands import node_commands, node_run
from hetplan.run.launch.spawn import NodeRun, RunError
from hetplan.run.loop.job import RankResult
from hetplan.run.loop.steplog import complete_steps, merge, read_records
from hetplan.run.measurement.energy_check import gpu_power_points, type_limit_w, with_energy
from hetplan.run.measurement.measure import (
    Measurement,
    default_path,
    save_measurement,
    summarize,
    with_predicted_memory,
    with_prediction,
    with_trace,
)
from hetplan.run.measurement.writeback import WriteBack, write_measured
from hetplan.run.setup.checkpoint import find_checkpoint, read_info
from hetplan.run.setup.layout import run_devices
from hetplan.run.setup.model import source_for
from hetplan.run.setup.precision import PRECISIONS
from hetplan.run.train import (
    Training,
    check_plan,
    check_training,
    log_results,
    predict_plan,
    run_node,
    run_plan,
)
from hetplan.run.tune import idle_devices, idle_watts
from hetplan.serde import load_file, write_text_atomic
from hetplan.simulate.timeline import Timeline
from hetplan.units import plural
from hetplan.usecases.feedback import SILENT, Feedback, Tick

if TYPE_CHECKING:
    from hetplan.predict.predict import Prediction


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """What one ``train`` does besides the plan: its steps, data, state and profile store."""

    steps: int
    warmup: int
    timeout: float = 600.0
    seed: int | None = None
    """Seed of the initial weights and the data order (None: 0; a resumed run keeps its
    checkpoint's)."""
    data: str | None = None
    resume: Path | None = None
    checkpoint: Path | None = None
    checkpoint_every: int = 0
    lr: float | None = None
    profiles: Path | None = None
    """Profile store directory (None: the default store)."""
    save_profile: bool = True
    """Write what the run measured back into the store."""
    overwrite_checkpoint: bool = False
    """Replace another run's checkpoints in :attr:`checkpoint` (else refused)."""

    @property
    def training(self) -> Training:
        """The run's :class:`Training` (its log folder is the flow's to set)."""
        return Training(
            data=self.data, resume=self.resume, checkpoint_dir=self.checkpoint,
            checkpoint_every=self.checkpoint_every, lr=self.lr,
            overwrite_checkpoint=self.overwrite_checkpoint,
        )  # fmt: skip

    @property
    def seed_value(self) -> int:
        return 0 if self.seed is None else self.seed


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """This machine's part of a run over several nodes (``--node``, ``--rdzv``, ``--run-id``)."""

    node: str
    rdzv: str
    run_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class NodeFinished:
    """This node's ranks are done; the run's first node writes the measurement."""

    node: str
    ranks: int
    first: str


@dataclass(frozen=True, kw_only=True)
class PowerRefit:
    """The run's plausible metered points of one GPU type, and what recording them did."""

    device_type: str
    record: PowerRecord


@dataclass(frozen=True, kw_only=True)
class TrainReport:
    """A finished run: its measurement (energy checked, prediction beside it) and files."""

    measurement: Measurement
    path: Path
    """The saved measurement."""
    chart: Path | None
    """The simulated against the executed timeline (None without a prediction)."""
    step_log: Path
    idle_w: float
    """Idle power of the cluster's devices the plan leaves out, watts (modelled)."""
    idle_devices: int
    refits: list[PowerRefit]
    write_back: WriteBack | None
    """What went back into the profile store (None: ``save_profile`` off)."""
    interval: Interval | None = None
    """The prediction's interval from the error history before this run (None without a
    prediction); the run's own record is added to the history after it."""


def load_plan(plan_file: Path, dtype: str | None = None) -> Plan:
    """The plan file, trained in ``dtype`` where given (a precision :data:`PRECISIONS` knows)."""
    plan = load_file(Plan, plan_file)
    if dtype is None:
        return plan
    if dtype not in PRECISIONS:
        raise InputError(f"--dtype: {dtype!r}; expected one of {', '.join(PRECISIONS)}")
    return dataclasses.replace(plan, model=dataclasses.replace(plan.model, dtype=dtype))


def cluster_for(
    plan: Plan, cluster_file: Path, plan_file: Path, profiles: Path | None, other: bool = False
) -> Cluster:
    """The cluster with its measured power fits; unless ``other``, InputError when the plan
    was made for another cluster."""
    clus, _ = with_power_fits(load_cluster(cluster_file), profiles)
    if not other:
        check_cluster(plan, clus, where=str(plan_file), option="--other-cluster")
    return clus


def node_command_lines(
    plan: Plan,
    clus: Cluster,
    opts: TrainOptions,
    *,
    paths: tuple[Path, Path],
    rdzv: str | None,
    options: list[str],
) -> list[str]:
    """Each node's ``train`` command (``paths``: the plan and cluster files), after the checks
    a run makes before it starts."""
    check_plan(plan, clus, source_for(plan.model), nodes=True)
    check_training(plan, opts.training)
    plan_path, cluster_path = paths
    return node_commands(
        plan, clus, plan_path=plan_path, cluster_path=cluster_path, rdzv=rdzv, options=options
    )


def measurement_path(plan: Plan, out: Path | None) -> Path:
    """Where the measurement goes: ``out``, else the plan's default file."""
    return out or default_path(plan)


def steps_path(measurement: Path) -> Path:
    """The JSON-lines step log beside a measurement file."""
    return measurement.with_suffix(".steps.jsonl")


def train(
    plan: Plan,
    clus: Cluster,
    opts: TrainOptions,
    path: Path,
    node: NodeSpec | None = None,
    feedback: Feedback = SILENT,
) -> TrainReport | NodeFinished:
    """Run (this node's ranks of) the plan, then report and write back what it measured."""
    here = None if node is None else node_run(plan, clus, node.node, node.rdzv, node.run_id)
    for line in [*resume_notes(opts), *tp_notes(plan)]:
        feedback.note(line)
    measured = execute(plan, clus, opts, here, steps_path(path), feedback)
    if measured is None:
        assert here is not None and node is not None
        return NodeFinished(node=node.node, ranks=len(here.ranks), first=here.nodes[0])
    return report(plan, clus, measured, path, opts)


def tp_notes(plan: Plan) -> list[str]:
    """A tensor-parallel plan of a model with blocks torch.fx could not trace: the runtime
    finds no units there either, and every TP rank computes those layers whole (predict's
    note, said before the run)."""
    if plan.tp == 1:
        return []
    return untraced_tp_notes(plan, build_graph(plan.model))


def resume_notes(opts: TrainOptions) -> list[str]:
    """What a resumed run says before it starts: where it resumes, and a ``--seed`` it keeps
    from the checkpoint instead (its data order and random streams go on as they were)."""
    if opts.resume is None:
        return []
    folder = find_checkpoint(opts.resume)
    info = read_info(folder)
    notes = [f"resumed from step {info.step} ({folder})"]
    if opts.seed is not None and opts.seed != info.seed:
        notes.append(
            f"--seed {opts.seed} ignored: a resumed run keeps its checkpoint's seed ({info.seed}), "
            "so that its data order and random streams go on as they were"
        )
    return notes


def execute(
    plan: Plan,
    clus: Cluster,
    opts: TrainOptions,
    here: NodeRun | None,
    step_log: Path,
    feedback: Feedback = SILENT,
) -> Measurement | None:
    """Run (this node's ranks of) the plan; write the step log. None on a node other than the
    first of a run over several nodes."""
    ranks = here.ranks if here is not None else list(range(len(run_devices(plan))))
    with tempfile.TemporaryDirectory(prefix="hetplan-steps-") as tmp:
        logs = Path(tmp)
        training = dataclasses.replace(opts.training, log_dir=logs)
        with feedback.run(logs, ranks, opts.steps + opts.warmup) as tick:
            try:
                raw = _launch(plan, clus, opts, training, here, tick)
            except RunError as err:  # keep the steps measured so far, then fail in one line
                kept = _kept(logs, ranks, step_log, here, opts, "the run failed")
                raise _with_log(err, step_log, kept) from None
            except Interrupted as stop:  # every process of the run is gone already
                kept = _kept(logs, ranks, step_log, here, opts, "the run was interrupted")
                raise stop.with_message(kept) from None
        if raw is None:
            return None
        log_results(logs, raw, plan, opts.warmup)
        merge(logs, len(run_devices(plan)), step_log)
    return summarize(plan, raw, warmup=opts.warmup, cluster=clus.name)


def _launch(
    plan: Plan,
    clus: Cluster,
    opts: TrainOptions,
    training: Training,
    here: NodeRun | None,
    tick: Tick,
) -> list[RankResult] | None:
    if here is None:
        return run_plan(
            plan, cluster=clus, steps=opts.steps, warmup=opts.warmup, seed=opts.seed_value,
            timeout_s=opts.timeout, training=training, on_tick=tick,
        )  # fmt: skip
    return run_node(
        plan, clus, here, steps=opts.steps, warmup=opts.warmup, seed=opts.seed_value,
        timeout_s=opts.timeout, training=training, on_tick=tick,
    )  # fmt: skip


def _with_log(err: RunError, step_log: Path, kept: str) -> RunError:
    """``err`` in one line that also says which steps were kept and where the failed rank's
    traceback was written (a log file beside the step log)."""
    parts = [str(err)] + ([kept] if kept else [])
    if err.details:
        log = step_log.with_name(step_log.name.removesuffix(".jsonl") + ".error.log")
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(err.details.rstrip() + "\n")
            parts.append(f"traceback in {log}")
        except OSError:
            pass  # the message stands without the log
    return RunError("; ".join(parts), rank=err.rank, details=err.details)


def _kept(
    logs: Path,
    ranks: list[int],
    step_log: Path,
    here: NodeRun | None,
    opts: TrainOptions,
    why: str,
) -> str:
    """What a run that ended early kept, in words: its complete steps (written beside the
    measurement), that no profile went back, and the checkpoint to resume from."""
    parts = [_keep_steps(logs, ranks, step_log, here)]
    if opts.save_profile:
        parts.append(f"no profile written back ({why})")
    parts.append(_resume_hint(opts.checkpoint))
    return "; ".join(p for p in parts if p)


def _resume_hint(directory: Path | None) -> str:
    """``resume with --resume <the newest complete checkpoint>``, or nothing without one."""
    if directory is None:
        return ""
    try:
        folder = find_checkpoint(directory)
    except InputError:
        return f"no checkpoint was written to {directory}"
    return f"resume with --resume {folder}"


def _keep_steps(logs: Path, ranks: list[int], step_log: Path, here: NodeRun | None) -> str:
    """The complete steps of this node's ranks, next to the measurement (a node other than the
    first writes its own file: the folder may be shared); what was kept, in words."""
    if here is not None and here.ranks and here.nodes[here.ranks[0]] != here.nodes[0]:
        step_log = step_log.with_suffix(f".{here.nodes[here.ranks[0]]}.jsonl")
    if not complete_steps(read_records(logs), ranks):
        return ""
    kept = merge(logs, ranks, step_log)
    return f"kept {plural(kept, 'measured step')} in {step_log}"


def report(
    plan: Plan, clus: Cluster, measured: Measurement, path: Path, opts: TrainOptions
) -> TrainReport:
    """The measurement with its energy and prediction, saved; the Gantt page; the power refit
    and the profile write-back."""
    measured = with_energy(measured, clus, opts.profiles)
    prediction, source = predict_plan(plan, clus, opts.profiles)
    chart = None
    timeline: Timeline | None = None
    interval = None
    if prediction is not None:
        interval = record_error(prediction, measured.measured_iteration_s, opts)
        timeline = prediction.timeline
        measured = with_prediction(measured, prediction.iteration_time_s, source)
        measured = with_predicted_memory(measured, comparable_memory(prediction))
        measured.predicted_energy_j_per_iteration = prediction.energy_j_per_iteration
        measured = with_trace(measured, prediction.timeline.spans())
        chart = trace_chart(measured, prediction.timeline, path.with_suffix(".gantt.html"))
    else:
        measured = with_prediction(measured, None, source)
    path = save_measurement(measured, path)
    refits = record_power(measured, clus, opts.profiles)
    back = write_back(measured, clus, timeline, opts.profiles) if opts.save_profile else None
    return TrainReport(
        measurement=measured, path=path, chart=chart, step_log=steps_path(path),
        idle_w=idle_watts(plan, clus, measured),
        idle_devices=len(idle_devices(plan, clus, measured)), refits=refits, write_back=back,
        interval=interval,
    )  # fmt: skip


def record_error(pred: Prediction, measured_s: float, opts: TrainOptions) -> Interval:
    """The prediction's interval from the store's error history, then this run's record
    added to it (unless ``--no-save-profile``: the store is left as it was)."""
    store = profile_dir(opts.profiles)
    interval = ErrorModel.load(store).interval(pred)
    if opts.save_profile:
        with contextlib.suppress(OSError):  # a read-only store: the run's report stands
            append_record(store, record_of(pred, measured_s, "train"))
    return interval


def trace_chart(m: Measurement, timeline: Timeline, path: Path) -> Path:
    """The simulated iteration (iteration 0) above the last executed step, a row per rank's
    device, on one time axis: a self-contained HTML page (:mod:`hetplan.report.gantt`)."""
    rows = [r.device for r in m.ranks]
    sim = [s for s in timeline.spans() if s.iteration == 0]
    executed = [a for r in m.ranks for a in r.actions]
    timing = ", ".join(sorted({r.timing for r in m.ranks}))
    title = f"{m.plan.model.name}: {m.plan.strategy}, {plural(len(rows), 'rank')}"
    fig = gantt_figure(rows, [Panel(title="simulated", bars=bars_of(sim)),
                              Panel(title=f"executed (last timed step, {timing})",
                                    bars=bars_of(executed))])  # fmt: skip
    write_text_atomic(path, gantt_page(fig, title))
    return path


def record_power(m: Measurement, cluster: Cluster, directory: Path | None) -> list[PowerRefit]:
    """Add the run's plausible metered GPU points to the power fits, per device type."""
    refits = []
    for kind, points in gpu_power_points(m, cluster, directory).items():
        limit = type_limit_w(m, cluster, kind)
        rec = record_power_points(kind, points, directory, limit_w=limit)
        refits.append(PowerRefit(device_type=kind, record=rec))
    return refits


def write_back(
    m: Measurement, clus: Cluster, timeline: Timeline | None, directory: Path | None
) -> WriteBack:
    """The run's stage times written back into the profile store; a store that cannot be
    written is a reason, not a failure (the measurement is saved already)."""
    try:
        return write_measured(m, clus, timeline, directory)
    except InputError as err:
        return WriteBack(skipped=[str(err)])
