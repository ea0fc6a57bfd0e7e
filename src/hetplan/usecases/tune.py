"""Tuning: the top predicted plans tried for real in short trials chained through checkpoints;
the best measured trains the remaining steps, and the result file says how each did."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetplan.cluster.spec import Cluster
from hetplan.plan.options import SearchOptions
from hetplan.plan.search import Ranked, Ranking
from hetplan.plan.staleness import is_asynchronous
from hetplan.planspec import Plan
from hetplan.predict.error_bars import append_record, record_of, ties_under
from hetplan.profile.store import profile_dir
from hetplan.run.loop.trial import DEFAULT_REL_HALFWIDTH
from hetplan.run.measurement.measure import save_measurement
from hetplan.run.train import Training, check_training
from hetplan.run.tune import Candidate, Trial, TuneResult, TuneSettings, tune
from hetplan.serde import to_data, write_json_atomic
from hetplan.usecases.feedback import SILENT, Feedback, Tick
from hetplan.usecases.plan import SearchRequest, search_plans


@dataclass(frozen=True, kw_only=True)
class TuneOptions:
    """The trials and the training after them (the search is a :class:`SearchRequest`)."""

    out: Path
    """The result file (JSON); the final measurement goes beside it (``.final.json``)."""
    steps: int = 60
    top: int = 3
    trial_steps: int = 20
    warmup: int = 1
    precision: float = DEFAULT_REL_HALFWIDTH
    data: str | None = None
    checkpoint: Path | None = None
    resume: Path | None = None
    seed: int = 0
    lr: float | None = None
    timeout: float = 600.0


@dataclass(frozen=True, kw_only=True)
class Tuned:
    """The trials and the final run, where their state went, and the result file's data."""

    result: TuneResult
    objective: str
    state: Path
    """The trials' and the final checkpoints (a temporary folder, gone, without
    ``checkpoint``)."""
    data: dict[str, Any]
    """What the result file holds."""


ONE_STAGE_AS_DP = ("dp", "gpipe", "1f1b", "hybrid")
"""Families whose one-stage plans run as data parallelism (one replica per pipeline)."""


def candidates_of(ranking: Ranking, top: int) -> list[Candidate]:
    """The ``top`` plans to try: the best predicted, then those that tie with it within the
    model's error (:func:`hetplan.predict.error_bars.ties_with_best`), then the rest, each
    distinct in what it would measure (:func:`measured_key`: a one-stage pipeline runs as data
    parallelism does)."""
    out: list[Candidate] = []
    seen: set[str] = set()
    for r in tie_order(ranking):
        key = measured_key(r.candidate.plan)
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


def tie_order(ranking: Ranking) -> list[Ranked]:
    """The ranked plans, those tying with the best (time objectives, intervals known) first."""
    ranked = ranking.ranked
    ties = ties_under(ranking.objective.name, [r.prediction.interval for r in ranked])
    if not any(ties):
        return list(ranked)
    tied = [r for r, t in zip(ranked, ties, strict=True) if t]
    return [ranked[0], *tied, *(r for r, t in zip(ranked[1:], ties[1:], strict=True) if not t)]


def measured_key(plan: Plan) -> str:
    """Equal for plans a trial would measure alike. A synchronous plan whose pipelines have
    one stage (gpipe, 1f1b, hybrid or dp) runs every device as a whole replica and
    synchronises gradients: it is known by its replicas (a stage's devices: one, or a
    tensor-parallel group) and their batches, not by its family or its micro-batches."""
    data = to_data(plan)
    if plan.num_stages == 1 and plan.strategy in ONE_STAGE_AS_DP and not is_asynchronous(plan):
        replicas = sorted((list(pipe.stages[0].devices), pipe.batch) for pipe in plan.pipelines)
        for name in ("strategy", "micro_batches", "pipelines"):
            data.pop(name, None)
        data["replicas"] = replicas
    return json.dumps(data, sort_keys=True)


def tune_plans(req: SearchRequest, opts: TuneOptions, feedback: Feedback = SILENT) -> Tuned:
    """Search, try the ``top`` candidates, train on with the best measured; write the result
    file and the final run's measurement."""
    found = search_plans(req, feedback)
    cands = candidates_of(found.ranking, opts.top)
    settings = _settings(opts, found.options)
    check_training(
        cands[0].plan,
        Training(data=opts.data, resume=opts.resume, checkpoint_dir=opts.checkpoint, lr=opts.lr),
    )
    with tempfile.TemporaryDirectory(prefix="hetplan-tune-") as tmp:
        state = opts.checkpoint if opts.checkpoint is not None else Path(tmp) / "state"
        settings = dataclasses.replace(settings, log_dir=Path(tmp) / "steps")
        result = _run(cands, found.cluster, settings, state, feedback)
        record_errors(result, found.ranking, req.profiles)
        if result.final is not None:
            save_measurement(result.final, opts.out.with_suffix(".final.json"))
        data = result_data(result, state, opts.out)
        write_json_atomic(opts.out, data)
    objective = found.options.objective.name
    return Tuned(result=result, objective=objective, state=state, data=data)


def record_errors(result: TuneResult, ranking: Ranking, store: Path | None) -> None:
    """Add each trial's and the final run's measured time against its prediction to the
    store's error history (:mod:`hetplan.predict.error_bars`), as ``train`` does."""
    predicted = {id(r.candidate.plan): r.prediction for r in ranking.ranked}
    runs = [(t.candidate.plan, t.measurement) for t in result.trials]
    if result.final is not None:
        runs.append((result.trials[result.chosen].candidate.plan, result.final))
    directory = profile_dir(store)
    for plan, measured in runs:
        pred = predicted.get(id(plan))
        if pred is None or measured.steps == 0:
            continue
        with contextlib.suppress(OSError):  # a read-only store: the trials' results stand
            append_record(directory, record_of(pred, measured.measured_iteration_s, "tune"))


def _settings(opts: TuneOptions, search: SearchOptions) -> TuneSettings:
    """The trials' settings: the search's objective and limits (per epoch: dataset size over
    batch iterations)."""
    size = search.dataset_size
    iterations = 1.0 if size is None else size / search.batch
    return TuneSettings(
        objective=search.objective, limits=search.limits, steps=opts.steps,
        warmup=opts.warmup, trial_steps=opts.trial_steps, rel_halfwidth=opts.precision,
        seed=opts.seed, data=opts.data, resume=opts.resume, timeout_s=opts.timeout,
        iterations=iterations, log_dir=None, lr=opts.lr,
    )  # fmt: skip


def _run(
    cands: list[Candidate],
    clus: Cluster,
    settings: TuneSettings,
    state: Path,
    feedback: Feedback,
) -> TuneResult:
    """``tune`` with the feedback of one run at a time (trials, then the final training)."""
    assert settings.log_dir is not None
    logs = settings.log_dir
    with contextlib.ExitStack() as stack:

        def on_trial(i: int, cand: Candidate, steps: int) -> Callable[[], None] | None:
            stack.close()  # the previous run's
            what = f"trial {i + 1}/{len(cands)}" if i < len(cands) else "training"
            label = f"{what}: {cand.label}"
            tick: Tick = stack.enter_context(
                feedback.run(logs / str(i), len(cand.plan.devices), steps, label)
            )
            return tick

        return tune(cands, clus, settings, state, on_trial=on_trial)


def result_data(result: TuneResult, state: Path, out: Path) -> dict[str, Any]:
    """The result file: every trial, the choice, the final run and where the state went."""
    final = result.final
    return {
        "trials": [_trial(t) for t in result.trials],
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


def _trial(t: Trial) -> dict[str, Any]:
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
