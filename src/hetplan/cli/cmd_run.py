"""``hetplan train``: execute a plan on this machine, measure it, compare with the prediction."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hetplan.cli.output import console, print_json
from hetplan.cli.paths import OtherClusterOpt, check_output, check_output_dir
from hetplan.cli.progress_view import ProgressLine
from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.plan.stamp import check_cluster
from hetplan.planspec import Plan
from hetplan.run.commands import node_commands, node_run
from hetplan.run.launch import NodeRun, RunError
from hetplan.run.layout import run_devices
from hetplan.run.steplog import complete_steps, merge, read_records
from hetplan.serde import load_file
from hetplan.units import plural

# The runtime, predictor and charts (torch, matplotlib) load inside the functions that use
# them: `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.run.measure import Measurement
    from hetplan.run.train import Training
    from hetplan.run.writeback import WriteBack


@dataclass(frozen=True, kw_only=True)
class _Run:
    """The options of one ``train`` that shape the run (not the report)."""

    steps: int
    warmup: int
    timeout: float
    seed: int
    training: Training
    as_json: bool
    profiles: Path | None = None
    """Profile store directory (None: the default store)."""
    save_profile: bool = True
    """Write what the run measured back into the store."""


def train_cmd(
    plan_file: Annotated[Path, typer.Argument(help="Plan file (JSON), as written by plan.")],
    cluster: Annotated[Path, typer.Option("--cluster", help="Cluster file (YAML or JSON).")],
    steps: Annotated[int, typer.Option(help="Timed training steps (after the warm-up).")] = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up steps: they train but are not timed.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Measurement file (JSON).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before the run is killed.")] = 600.0,
    node: Annotated[
        str | None,
        typer.Option(help="Run this node's ranks of a plan over several nodes (with --rdzv)."),
    ] = None,
    rdzv: Annotated[
        str | None,
        typer.Option(help="HOST:PORT where the nodes meet: the plan's first node (rank 0's)."),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            help="Id of a run over several nodes, the same on every node (e.g. a job id)."
        ),
    ] = None,
    print_commands: Annotated[
        bool,
        typer.Option("--print-commands", help="Print the command of each node (several nodes)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="Training precision (default: the plan's model.dtype). Mixed precision: "
            "autocast over fp32 master weights (fp16 adds a loss scaler)."
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            help="Train on your data: FILE.py:fn or package.module:fn returning a Dataset "
            "(map-style or iterable) or (dataset, loss_fn). Default: synthetic batches."
        ),
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="Write checkpoints to this directory (one at the end).")
    ] = None,
    checkpoint_every: Annotated[
        int, typer.Option(help="Also checkpoint every this many steps (0: only at the end).")
    ] = 0,
    resume: Annotated[
        Path | None,
        typer.Option(help="Start from a checkpoint (a step folder, or a --checkpoint directory)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of initial weights and data order.")] = 0,
    other_cluster: OtherClusterOpt = False,
    lr: Annotated[
        float | None, typer.Option(help="Learning rate (default: 0.01 for SGD, 1e-3 for Adam).")
    ] = None,
    profiles: Annotated[
        Path | None,
        typer.Option(help="Profile store directory: the prediction reads it, the run writes back."),
    ] = None,
    save_profile: Annotated[
        bool,
        typer.Option(
            "--save-profile/--no-save-profile",
            help="Write the measured stage times back to the profile store per device type and "
            "micro-batch size (docs/profiling.md).",
        ),
    ] = True,
) -> None:
    """Run a plan for real with torch.distributed: train on synthetic batches or your data,
    checkpoint and resume (under any plan); print measured vs predicted iteration time, energy,
    peak memory per rank and the loss of every step; draw the executed against the simulated
    timeline; log every step as JSON lines next to the measurement. A plan over several nodes
    runs with one command per node (--node NAME --rdzv HOST:PORT; --print-commands)."""
    from hetplan.run.measure import default_path
    from hetplan.run.model import source_for
    from hetplan.run.power_profile import with_power_fits
    from hetplan.run.precision import PRECISIONS
    from hetplan.run.train import Training, check_plan, check_training

    plan = load_file(Plan, plan_file)
    if dtype is not None:
        if dtype not in PRECISIONS:
            raise InputError(f"--dtype: {dtype!r}; expected one of {', '.join(PRECISIONS)}")
        plan = dataclasses.replace(plan, model=dataclasses.replace(plan.model, dtype=dtype))
    if profiles is not None:
        check_output_dir(profiles, "--profiles")
    clus, _ = with_power_fits(load_cluster(cluster), profiles)
    if not other_cluster:
        check_cluster(plan, clus, where=str(plan_file), option="--other-cluster")
    training = Training(
        data=data, resume=resume, checkpoint_dir=checkpoint, checkpoint_every=checkpoint_every,
        lr=lr,
    )  # fmt: skip
    if print_commands:  # a run checks these itself (run_plan, run_node) before it starts
        check_plan(plan, clus, source_for(plan.model), nodes=True)
        check_training(plan, training)
        options = _options(steps, warmup, out, data, checkpoint, checkpoint_every, resume, seed, lr)
        options += ["--run-id", run_id] if run_id else []
        options += ["--other-cluster"] if other_cluster else []
        options += ["--profiles", str(profiles)] if profiles is not None else []
        options += [] if save_profile else ["--no-save-profile"]
        cmds = node_commands(
            plan, clus, plan_path=plan_file, cluster_path=cluster, rdzv=rdzv, options=options
        )
        for line in cmds:
            typer.echo(line)
        return
    path = out or default_path(plan)
    check_output(path, "--out")
    if checkpoint is not None:
        check_output_dir(checkpoint, "--checkpoint")
    here = None
    if node is not None or rdzv is not None:
        if node is None or rdzv is None:
            raise InputError("--node and --rdzv go together: --node NAME --rdzv HOST:PORT")
        here = node_run(plan, clus, node, rdzv, run_id)
    run = _Run(
        steps=steps, warmup=warmup, timeout=timeout, seed=seed, training=training,
        as_json=as_json, profiles=profiles, save_profile=save_profile,
    )  # fmt: skip
    measured = _execute(plan, clus, run, here, steps_path(path))
    if measured is None:
        assert here is not None
        first = here.nodes[0]
        console.print(f"node {node}: its {len(here.ranks)} rank(s) finished; node {first} "
                      "writes the measurement")  # fmt: skip
        return
    _report(plan, clus, measured, path, run)


def _execute(
    plan: Plan, clus: Cluster, run: _Run, here: NodeRun | None, step_log: Path
) -> Measurement | None:
    """Run (this node's ranks of) the plan with a progress line; write the step log. None on a
    node other than the first of a run over several nodes."""
    from hetplan.run.measure import summarize
    from hetplan.run.train import log_results

    ranks = here.ranks if here is not None else list(range(len(run_devices(plan))))
    with tempfile.TemporaryDirectory(prefix="hetplan-steps-") as tmp:
        logs = Path(tmp)
        training = dataclasses.replace(run.training, log_dir=logs)
        with ProgressLine(logs, ranks, run.steps + run.warmup, enabled=not run.as_json) as bar:
            try:
                raw = _launch(plan, clus, run, training, here, bar.poll)
            except RunError as err:  # keep the steps measured so far, then fail in one line
                kept = _keep_steps(logs, ranks, step_log, here)
                if run.save_profile:
                    kept += ("; " if kept else "") + "no profile written back (the run failed)"
                raise _with_log(err, step_log, kept) from None
        if raw is None:
            return None
        log_results(logs, raw, plan, run.warmup)
        merge(logs, len(run_devices(plan)), step_log)
    return summarize(plan, raw, warmup=run.warmup, cluster=clus.name)


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


def _keep_steps(logs: Path, ranks: list[int], step_log: Path, here: NodeRun | None) -> str:
    """The complete steps of this node's ranks, next to the measurement (a node other than the
    first writes its own file: the folder may be shared); what was kept, in words."""
    if here is not None and here.ranks and here.nodes[here.ranks[0]] != here.nodes[0]:
        step_log = step_log.with_suffix(f".{here.nodes[here.ranks[0]]}.jsonl")
    if not complete_steps(read_records(logs), ranks):
        return ""
    kept = merge(logs, ranks, step_log)
    return f"kept {plural(kept, 'measured step')} in {step_log}"


def _launch(
    plan: Plan,
    clus: Cluster,
    run: _Run,
    training: Training,
    here: NodeRun | None,
    tick: Callable[[], None],
) -> list[dict[str, Any]] | None:
    from hetplan.run.train import run_node, run_plan

    if here is None:
        return run_plan(
            plan, cluster=clus, steps=run.steps, warmup=run.warmup, seed=run.seed,
            timeout_s=run.timeout, training=training, on_tick=tick,
        )  # fmt: skip
    return run_node(
        plan, clus, here, steps=run.steps, warmup=run.warmup, seed=run.seed,
        timeout_s=run.timeout, training=training, on_tick=tick,
    )  # fmt: skip


def _report(plan: Plan, clus: Cluster, measured: Measurement, path: Path, run: _Run) -> None:
    """Energy, prediction, chart, the saved measurement and profile write-back, printed or as
    JSON."""
    from hetplan.bench.runner import comparable_memory
    from hetplan.cli.train_view import print_report, report_json, trace_chart
    from hetplan.cli.writeback_view import writeback_json, writeback_lines
    from hetplan.run.energy_check import with_energy
    from hetplan.run.measure import (
        save_measurement,
        with_predicted_memory,
        with_prediction,
        with_trace,
    )
    from hetplan.run.train import predict_plan
    from hetplan.run.tune import idle_devices, idle_watts

    measured = with_energy(measured, clus, run.profiles)
    prediction, source = predict_plan(plan, clus, run.profiles)
    chart = None
    if prediction is not None:
        measured = with_prediction(measured, prediction.iteration_time_s, source)
        memory = comparable_memory(prediction)
        measured = with_predicted_memory(measured, memory)
        measured.predicted_energy_j_per_iteration = prediction.energy_j_per_iteration
        measured = with_trace(measured, prediction.timeline.spans())
        chart = trace_chart(measured, prediction.timeline, path.with_suffix(".gantt.html"))
    else:
        measured = with_prediction(measured, None, source)
    path = save_measurement(measured, path)
    fits = _record_power(measured, clus, run.profiles)
    timeline = prediction.timeline if prediction is not None else None
    back = _write_back(measured, clus, timeline, run) if run.save_profile else None
    step_log = steps_path(path)
    if run.as_json:
        report = report_json(measured, path, chart, idle_watts(plan, clus, measured))
        print_json(report | {"step_log": str(step_log)} | writeback_json(back))
        return
    unused = len(idle_devices(plan, clus, measured))
    print_report(measured, path, chart, (idle_watts(plan, clus, measured), unused))
    console.print(f"step log: {step_log}")
    for line in fits + writeback_lines(back):
        console.print(line, soft_wrap=True)


def _write_back(m: Measurement, clus: Cluster, timeline: object | None, run: _Run) -> WriteBack:
    """The run's stage times written back into the profile store; a store that cannot be
    written is a reason, not a failure (the measurement is saved already)."""
    from hetplan.run.writeback import WriteBack, write_measured

    try:
        return write_measured(m, clus, timeline, run.profiles)
    except InputError as err:
        return WriteBack(skipped=[str(err)])


def _record_power(m: Measurement, cluster: Cluster, directory: Path | None) -> list[str]:
    """Add the run's plausible metered GPU points to the power fits; one line per type."""
    from hetplan.run.energy_check import gpu_power_points, type_limit_w
    from hetplan.run.power_profile import record_power_points

    lines = []
    for kind, points in gpu_power_points(m, cluster, directory).items():
        limit = type_limit_w(m, cluster, kind)
        rec = record_power_points(kind, points, directory, limit_w=limit)
        if rec.refused is not None:
            lines.append(f"power model of {kind} not refitted: {rec.refused}")
        elif rec.fit is not None:
            lines.append(
                f"power model of {kind} refitted from {rec.fit.samples} measured points: idle "
                f"{rec.fit.idle_w:.0f} W, max {rec.fit.max_w:.0f} W"
            )
    return lines


def _options(
    steps: int,
    warmup: int,
    out: Path | None,
    data: str | None,
    checkpoint: Path | None,
    every: int,
    resume: Path | None,
    seed: int,
    lr: float | None,
) -> list[str]:
    """The options of this ``train`` that every node's command repeats."""
    opts = ["--steps", str(steps), "--warmup", str(warmup)]
    for flag, value in (
        ("--out", out), ("--data", data), ("--checkpoint", checkpoint), ("--resume", resume)
    ):  # fmt: skip
        if value is not None:
            opts += [flag, str(value)]
    if every:
        opts += ["--checkpoint-every", str(every)]
    if seed:
        opts += ["--seed", str(seed)]
    if lr is not None:
        opts += ["--lr", repr(lr)]
    return opts


def steps_path(measurement: Path) -> Path:
    """The JSON-lines step log beside a measurement file."""
    return measurement.with_suffix(".steps.jsonl")


def register(app: typer.Typer) -> None:
    """Add ``train`` to ``app``."""
    app.command("train")(train_cmd)
