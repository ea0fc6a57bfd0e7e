"""``hetplan tune``: try the top predicted plans for real, keep the best measured, train on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from hetplan.cli.output import console, print_json
from hetplan.cli.paths import check_input_dir, check_output, check_output_dir
from hetplan.cli.search_options import (
    AnalyticalOpt,
    AsynchronousOpt,
    BatchOpt,
    BudgetOpt,
    ClusterOpt,
    DatasetOpt,
    DeadlineOpt,
    DevicesOpt,
    DtypeOpt,
    ModelOpt,
    ObjectiveOpt,
    OptimizerOpt,
    PowerOpt,
    ProfilesOpt,
    SizeOpt,
    SyncOnlyOpt,
)
from hetplan.cli.status import Terminal
from hetplan.errors import InputError
from hetplan.run.loop.trial import DEFAULT_REL_HALFWIDTH
from hetplan.units import fmt_seconds

# The flow (search, runtime: numpy and torch) loads inside the command: `hetplan --help` stays
# quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.run.tune import Trial, TuneResult


def _energy(t: Trial, predicted: bool) -> str:
    return f"{(t.predicted if predicted else t.metrics).energy_j:.3g}"


def _print(result: TuneResult, objective: str, state: Path) -> None:
    table = Table(title=f"trials (objective: {objective}; measured decides)")
    heads = ("#", "plan", "steps", "pred it", "meas it", "error", "pred J/it", "meas J/it")
    for col in (*heads, "score", "stopped"):
        table.add_column(col, justify="left" if col in ("plan", "stopped") else "right")
    for i, t in enumerate(result.trials):
        m = t.measurement
        mark = " [bold green]<- chosen[/]" if i == result.chosen else ""
        err = "-" if m.relative_error is None else f"{100 * m.relative_error:+.0f}%"
        table.add_row(
            str(i + 1), t.candidate.label + mark, str(t.steps),
            fmt_seconds(t.candidate.predicted_s), fmt_seconds(m.measured_iteration_s), err,
            _energy(t, True), _energy(t, False), f"{t.score:.4g}", m.stopped or "max steps",
        )  # fmt: skip
    console.print(table)
    source = result.trials[0].measurement.energy_source
    console.print(
        f"energy: {source}; both columns include the idle power of the cluster's devices a plan "
        "leaves out"
    )
    if result.predicted_best != result.chosen:
        p = result.predicted_best
        console.print(
            f"the measurement overturned the prediction: predicted best #{p + 1} "
            f"({result.trials[p].candidate.label}), measured best #{result.chosen + 1}"
        )
    for note in result.notes:
        console.print(f"note: {note}")
    final = result.final
    if final is not None:
        console.print(
            f"trained {final.warmup + final.steps} more steps with #{result.chosen + 1}: "
            f"iteration {fmt_seconds(final.measured_iteration_s)}, loss {final.loss[0]:.4f} -> "
            f"{final.loss[-1]:.4f}"
        )
    console.print(f"total steps {result.total_steps}; checkpoints under {state}")


def _check_cheap(
    out: Path, checkpoint: Path | None, profiles: Path | None, lr: float | None
) -> None:
    """The inputs that need no plan, before the search traces the model (seconds); the
    training's own checks repeat them once the candidates are known."""
    check_output(out, "--out")
    if checkpoint is not None:
        check_output_dir(checkpoint, "--checkpoint")
    check_input_dir(profiles, "--profiles")
    if lr is not None and not lr > 0:
        raise InputError(f"--lr must be > 0 (got {lr:g})")


def tune_cmd(
    model: ModelOpt,
    cluster: ClusterOpt,
    steps: Annotated[int, typer.Option(help="Total training steps, trials included.")] = 60,
    top: Annotated[int, typer.Option(help="Candidates to try (the best predicted).")] = 3,
    trial_steps: Annotated[int, typer.Option(help="Most timed steps of one trial.")] = 20,
    warmup: Annotated[int, typer.Option(help="Untimed steps opening each trial.")] = 1,
    precision: Annotated[
        float,
        typer.Option(help="End a trial once its mean step time is known to this fraction."),
    ] = DEFAULT_REL_HALFWIDTH,
    data: Annotated[
        str | None, typer.Option(help="FILE.py:fn returning a Dataset (default: synthetic).")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="Directory for the trials' and final checkpoints.")
    ] = None,
    resume: Annotated[Path | None, typer.Option(help="Start from this checkpoint.")] = None,
    out: Annotated[Path, typer.Option(help="Result file (JSON).")] = Path("out/tune.json"),
    dataset: DatasetOpt = None,
    objective: ObjectiveOpt = "time",
    batch: BatchOpt = 64,
    optimizer: OptimizerOpt = "sgd",
    dtype: DtypeOpt = "fp32",
    dataset_size: SizeOpt = None,
    max_power: PowerOpt = None,
    max_devices: DevicesOpt = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    profiles: ProfilesOpt = None,
    analytical: AnalyticalOpt = False,
    asynchronous: AsynchronousOpt = False,
    sync_only: SyncOnlyOpt = False,
    seed: Annotated[int, typer.Option(help="Seed of initial weights and data order.")] = 0,
    lr: Annotated[
        float | None, typer.Option(help="Learning rate (default: 0.01 for SGD, 1e-3 for Adam).")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before one run is killed.")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Plan the top candidates for the objective, run each for a few trial steps for real,
    pick the best measured, and train the remaining steps with it from the trials' state."""
    from hetplan.usecases.plan import SearchRequest
    from hetplan.usecases.tune import TuneOptions, tune_plans

    if top < 1:
        raise InputError(f"--top must be >= 1 (got {top})")
    if not 0 < precision < 1:
        raise InputError(f"--precision must be between 0 and 1 (got {precision:g})")
    _check_cheap(out, checkpoint, profiles, lr)
    req = SearchRequest(
        model=model, cluster=cluster, dataset=dataset, objective=objective, batch=batch,
        optimizer=optimizer, dtype=dtype, dataset_size=dataset_size, max_power=max_power,
        max_devices=max_devices, deadline=deadline, budget=budget, profiles=profiles,
        analytical=analytical, asynchronous=asynchronous, sync_only=sync_only,
    )  # fmt: skip
    opts = TuneOptions(
        out=out, steps=steps, top=top, trial_steps=trial_steps, warmup=warmup,
        precision=precision, data=data, checkpoint=checkpoint, resume=resume, seed=seed, lr=lr,
        timeout=timeout,
    )  # fmt: skip
    tuned = tune_plans(req, opts, Terminal(quiet=as_json))
    if as_json:
        print_json(tuned.data)
        return
    _print(tuned.result, tuned.objective, tuned.state)
    if checkpoint is None:
        console.print("(no --checkpoint: the trained state was not kept)")


def register(app: typer.Typer) -> None:
    """Add ``tune`` to ``app``."""
    app.command("tune")(tune_cmd)
