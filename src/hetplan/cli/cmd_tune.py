"""``hetplan tune``: try the top predicted plans for real, keep the best measured, train on."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from hetplan.cli.cmd_plan import (
    AnalyticalOpt,
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
    SearchRequest,
    SizeOpt,
    SyncOnlyOpt,
    run_search,
)
from hetplan.cli.output import console, print_json
from hetplan.cli.paths import check_output
from hetplan.cli.progress_view import ProgressLine
from hetplan.errors import InputError
from hetplan.run.trial import DEFAULT_REL_HALFWIDTH
from hetplan.serde import to_data, write_json_atomic
from hetplan.units import fmt_seconds

# The runtime (torch) loads inside the functions that use it: `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.plan.search import Ranking
    from hetplan.run.tune import Candidate, Trial, TuneResult, TuneSettings


def candidates_of(ranking: Ranking, top: int) -> list[Candidate]:
    """The ``top`` best distinct plans of a ranking, best predicted first."""
    from hetplan.run.tune import Candidate

    out: list[Candidate] = []
    seen: set[str] = set()
    for r in ranking.ranked:
        key = str(to_data(r.candidate.plan))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            Candidate(
                label=r.candidate.label,
                plan=r.candidate.plan,
                predicted_s=r.prediction.iteration_time_s,
                predicted_energy_j=r.prediction.energy_j_per_iteration,
            )
        )
        if len(out) == top:
            break
    return out


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


def _json(result: TuneResult, state: Path, out: Path) -> dict[str, Any]:
    def trial(t: Trial) -> dict[str, Any]:
        m = t.measurement
        return {
            "label": t.candidate.label,
            "plan": to_data(t.candidate.plan),
            "steps": t.steps,
            "stopped": m.stopped,
            "predicted_iteration_s": t.candidate.predicted_s,
            "measured_iteration_s": m.measured_iteration_s,
            "predicted_energy_j_per_iteration": t.predicted.energy_j,
            "measured_energy_j_per_iteration": t.metrics.energy_j,
            "energy_source": m.energy_source,
            "idle_w_of_unused_devices": t.idle_w,
            "score": t.score,
            "violations": t.violations,
            "losses": m.loss,
        }

    final = result.final
    return {
        "trials": [trial(t) for t in result.trials],
        "chosen": result.chosen,
        "predicted_best": result.predicted_best,
        "total_steps": result.total_steps,
        "final": None
        if final is None
        else {
            "steps": final.warmup + final.steps,
            "measured_iteration_s": final.measured_iteration_s,
            "losses": final.loss,
            "checkpoint": final.checkpoint,
        },
        "checkpoints": str(state),
        "file": str(out),
        "notes": result.notes,
    }


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
    from hetplan.run.measure import save_measurement
    from hetplan.run.train import Training, check_training
    from hetplan.run.tune import TuneSettings

    if top < 1:
        raise InputError(f"--top must be >= 1 (got {top})")
    if not 0 < precision < 1:
        raise InputError(f"--precision must be between 0 and 1 (got {precision:g})")
    check_output(out, "--out")
    req = SearchRequest(
        model=model, cluster=cluster, dataset=dataset, objective=objective, batch=batch,
        optimizer=optimizer, dtype=dtype, dataset_size=dataset_size, max_power=max_power,
        max_devices=max_devices, deadline=deadline, budget=budget, profiles=profiles,
        analytical=analytical, sync_only=sync_only,
    )  # fmt: skip
    ranking, clus, opts, _ = run_search(req, as_json)
    cands = candidates_of(ranking, top)
    iterations = 1.0 if opts.dataset_size is None else opts.dataset_size / opts.batch
    settings = TuneSettings(
        objective=opts.objective, limits=opts.limits, steps=steps, warmup=warmup,
        trial_steps=trial_steps, rel_halfwidth=precision, seed=seed, data=data, resume=resume,
        timeout_s=timeout, iterations=iterations, log_dir=None, lr=lr,
    )  # fmt: skip
    check_training(
        cands[0].plan, Training(data=data, resume=resume, checkpoint_dir=checkpoint, lr=lr)
    )
    with tempfile.TemporaryDirectory(prefix="hetplan-tune-") as tmp:
        state = checkpoint if checkpoint is not None else Path(tmp) / "state"
        settings = dataclasses.replace(settings, log_dir=Path(tmp) / "steps")
        result = _run(cands, clus, settings, state, quiet=as_json)
        if result.final is not None:
            save_measurement(result.final, out.with_suffix(".final.json"))
        report = _json(result, state, out)
        write_json_atomic(out, report)
        if as_json:
            print_json(report)
        else:
            _print(result, opts.objective.name, state)
            if checkpoint is None:
                console.print("(no --checkpoint: the trained state was not kept)")


def _run(
    cands: list[Candidate], clus: Any, settings: TuneSettings, state: Path, quiet: bool
) -> TuneResult:
    """``tune`` with one progress line per run (trials, then the final training)."""
    from hetplan.run.tune import tune

    assert settings.log_dir is not None
    logs = settings.log_dir
    with contextlib.ExitStack() as stack:

        def on_trial(i: int, cand: Candidate, steps: int) -> Callable[[], None] | None:
            stack.close()  # the previous run's line
            what = f"trial {i + 1}/{len(cands)}" if i < len(cands) else "training"
            line = ProgressLine(
                logs / str(i), len(cand.plan.devices), steps, enabled=not quiet,
                label=f"{what}: {cand.label}",
            )  # fmt: skip
            stack.enter_context(line)
            return line.poll

        return tune(cands, clus, settings, state, on_trial=on_trial)


def register(app: typer.Typer) -> None:
    """Add ``tune`` to ``app``."""
    app.command("tune")(tune_cmd)
