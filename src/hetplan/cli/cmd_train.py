"""``hetplan train``: execute a plan on this machine, measure it, compare with the prediction."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hetplan.cli.output import console, print_json
from hetplan.cli.paths import OtherClusterOpt, check_output, check_output_dir
from hetplan.cli.status import Terminal
from hetplan.errors import InputError

# The flow (runtime, predictor and charts: torch, plotly) loads inside the command: `hetplan
# --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.usecases.train import TrainReport


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
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of initial weights and data order (default 0; a resumed run keeps its "
            "checkpoint's)."
        ),
    ] = None,
    overwrite_checkpoint: Annotated[
        bool,
        typer.Option(
            "--overwrite-checkpoint",
            help="Replace the checkpoints another run left in the --checkpoint directory "
            "(refused otherwise, unless this run resumes from it).",
        ),
    ] = False,
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
    from hetplan.usecases import train as flow

    plan = flow.load_plan(plan_file, dtype)
    if profiles is not None:
        check_output_dir(profiles, "--profiles")
    clus = flow.cluster_for(plan, cluster, plan_file, profiles, other_cluster)
    opts = flow.TrainOptions(
        steps=steps, warmup=warmup, timeout=timeout, seed=seed, data=data, resume=resume,
        checkpoint=checkpoint, checkpoint_every=checkpoint_every, lr=lr, profiles=profiles,
        save_profile=save_profile, overwrite_checkpoint=overwrite_checkpoint,
    )  # fmt: skip
    if print_commands:  # a run checks these itself (run_plan, run_node) before it starts
        options = _options(steps, warmup, out, data, checkpoint, checkpoint_every, resume, seed, lr)
        options += ["--run-id", run_id] if run_id else []
        options += ["--other-cluster"] if other_cluster else []
        options += ["--profiles", str(profiles)] if profiles is not None else []
        options += [] if save_profile else ["--no-save-profile"]
        options += ["--overwrite-checkpoint"] if overwrite_checkpoint else []
        lines = flow.node_command_lines(
            plan, clus, opts, paths=(plan_file, cluster), rdzv=rdzv, options=options
        )
        for line in lines:
            typer.echo(line)
        return
    path = flow.measurement_path(plan, out)
    check_output(path, "--out")
    if checkpoint is not None:
        check_output_dir(checkpoint, "--checkpoint")
    here = None
    if node is not None or rdzv is not None:
        if node is None or rdzv is None:
            raise InputError("--node and --rdzv go together: --node NAME --rdzv HOST:PORT")
        here = flow.NodeSpec(node=node, rdzv=rdzv, run_id=run_id)
    done = flow.train(plan, clus, opts, path, here, Terminal(quiet=as_json))
    if isinstance(done, flow.NodeFinished):
        console.print(f"node {done.node}: its {done.ranks} rank(s) finished; node {done.first} "
                      "writes the measurement")  # fmt: skip
        return
    _print(done, as_json)


def _print(done: TrainReport, as_json: bool) -> None:
    """The run's report, its step log and what went back into the profile store."""
    from hetplan.cli.train_view import power_lines, print_report, report_json
    from hetplan.cli.writeback_view import writeback_json, writeback_lines

    m = done.measurement
    iv = done.interval
    if as_json:
        report = report_json(m, done.path, done.chart, done.idle_w)
        report["iteration_interval_s"] = None if iv is None else [iv.low_s, iv.high_s]
        report["inside_interval"] = None if iv is None else iv.holds(m.measured_iteration_s)
        print_json(report | {"step_log": str(done.step_log)} | writeback_json(done.write_back))
        return
    print_report(m, done.path, done.chart, (done.idle_w, done.idle_devices))
    if iv is not None:
        where = "inside" if iv.holds(m.measured_iteration_s) else "outside"
        console.print(
            f"the measurement is {where} the prediction's {iv.coverage:.0%} interval "
            f"{iv.text()} ({iv.basis})",
            markup=False,
        )
    console.print(f"step log: {done.step_log}")
    for line in power_lines(done.refits) + writeback_lines(done.write_back):
        console.print(line, soft_wrap=True)


def _options(
    steps: int,
    warmup: int,
    out: Path | None,
    data: str | None,
    checkpoint: Path | None,
    every: int,
    resume: Path | None,
    seed: int | None,
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
    if seed is not None:
        opts += ["--seed", str(seed)]
    if lr is not None:
        opts += ["--lr", repr(lr)]
    return opts


def register(app: typer.Typer) -> None:
    """Add ``train`` to ``app``."""
    app.command("train")(train_cmd)
