"""Measured selection: run the top predicted plans for a few steps each, keep the best measured,
and train the remaining steps with it (``hetplan tune``).

The trials train the model: they run one after another, each resuming the checkpoint the
previous one left (:mod:`hetplan.run.setup.checkpoint`, across plans), and the winner resumes the
last trial's state. The steps of every trial count towards the total, so a tune of ``N`` steps
trains exactly ``N`` steps. A trial ends early by :class:`hetplan.run.loop.trial.StopRule`: once its
mean iteration time is known to the stated precision, or (objective time) once it is clearly
slower than the best trial so far.

Candidates are scored on their measured metrics with the search's own objective and limits
(:mod:`hetplan.plan.objective`). Energy counts every device of the cluster: the plan's devices
as measured (or modelled from their measured busy time where no meter exists) and the idle
power of the devices the plan leaves out, which still draw it; predictions get the same idle
term, so that "use fewer devices" is not an energy win by omission.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hetplan.cluster.spec import Cluster, Device
from hetplan.cost import power as pw
from hetplan.errors import InputError
from hetplan.plan.objective import Limits, Metrics, Objective
from hetplan.planspec import Plan
from hetplan.run.launch.spawn import RunError
from hetplan.run.loop.trial import DEFAULT_MIN_TIMED, DEFAULT_REL_HALFWIDTH, StopRule
from hetplan.run.measurement.energy_check import with_energy
from hetplan.run.measurement.measure import Measurement, with_prediction
from hetplan.run.setup.layout import run_devices
from hetplan.run.setup.model import ModelSource, source_for
from hetplan.run.train import Training, check_plan, measure_plan

TIME_METRICS = ("time", "throughput")
"""Objectives for which a slower trial has lost (early stop on being clearly slower)."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A plan to try, with what the predictor said of it."""

    label: str
    plan: Plan
    predicted_s: float
    predicted_energy_j: float
    """Per iteration, plan devices only (the idle of the others is added by :func:`tune`)."""


@dataclass(kw_only=True)
class Trial:
    """One candidate's trial run."""

    candidate: Candidate
    measurement: Measurement
    idle_w: float
    """Idle watts of the cluster's devices the plan leaves out."""
    metrics: Metrics
    """Measured metrics (energy incl. ``idle_w``)."""
    predicted: Metrics
    """Predicted metrics (energy incl. ``idle_w``)."""
    steps: int
    """Steps the trial trained (warm-up included)."""
    score: float = float("inf")
    violations: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class TuneResult:
    trials: list[Trial]
    chosen: int
    """Index of the winning trial."""
    final: Measurement | None
    """The winner's run of the remaining steps (None when the trials used every step)."""
    total_steps: int
    predicted_scores: list[float] = field(default_factory=list)
    """Each trial's score by its predicted metrics (the same objective)."""
    notes: list[str] = field(default_factory=list)

    @property
    def predicted_best(self) -> int:
        """Index of the trial the predictions rank best."""
        return min(range(len(self.trials)), key=lambda i: self.predicted_scores[i])


@dataclass(frozen=True, kw_only=True)
class TuneSettings:
    objective: Objective
    limits: Limits = field(default_factory=Limits)
    steps: int
    """Total training steps: every trial's and the winner's."""
    warmup: int = 1
    """Untimed steps at the start of each trial (they still train)."""
    trial_steps: int = 20
    """Most timed steps of one trial."""
    rel_halfwidth: float = DEFAULT_REL_HALFWIDTH
    min_timed: int = DEFAULT_MIN_TIMED
    seed: int = 0
    data: str | None = None
    resume: Path | None = None
    timeout_s: float = 600.0
    iterations: float = 1.0
    """Iterations per epoch, for limits set per epoch (deadline, budget); 1: per iteration."""
    lr: float | None = None
    """Learning rate (None: the optimizer's default)."""
    log_dir: Path | None = None
    """Where run ``i`` (trials, then the final run) logs its steps: ``log_dir / str(i)``."""


def trial_budget(n: int, s: TuneSettings) -> int:
    """Steps the trials need at least; InputError when ``steps`` cannot hold them."""
    if s.warmup < 0:
        raise InputError(f"--warmup must be >= 0 (got {s.warmup})")
    if s.min_timed < 2:
        raise InputError(f"a trial needs at least 2 timed steps (got {s.min_timed})")
    if s.trial_steps < s.min_timed:
        raise InputError(
            f"--trial-steps ({s.trial_steps}) must be >= the minimum of {s.min_timed} timed steps"
        )
    need = n * (s.warmup + s.min_timed)
    if s.steps < need:
        raise InputError(
            f"--steps {s.steps}: {n} trials need at least {need} steps "
            f"({s.warmup} warm-up + {s.min_timed} timed each); raise --steps or lower --top"
        )
    return need


def idle_devices(plan: Plan, cluster: Cluster, measured: Measurement | None = None) -> list[Device]:
    """The cluster's devices that ``plan`` does not use, less the CPU devices of a node whose
    packages a RAPL meter read during ``measured`` (the reading already holds them)."""
    used = set(run_devices(plan))
    covered = metered_nodes(measured, cluster) if measured is not None else set()
    return [
        d
        for d in cluster.devices
        if d.id not in used and not (d.node in covered and d.type.name == "cpu")
    ]


def idle_watts(plan: Plan, cluster: Cluster, measured: Measurement | None = None) -> float:
    """Idle power of :func:`idle_devices`, watts."""
    return sum(d.type.idle_power_w for d in idle_devices(plan, cluster, measured))


def metered_nodes(m: Measurement, cluster: Cluster) -> set[str]:
    """Nodes whose CPU packages were measured by RAPL in ``m`` (when its energy is measured)."""
    if m.energy_j_per_iteration is None or not m.energy_source.startswith("measured"):
        return set()
    return {cluster.device(r.device).node for r in m.ranks if r.energy_source == "rapl"}


def _hourly(plan: Plan, cluster: Cluster) -> float | None:
    prices = [cluster.device(d).type.price_per_hour for d in plan.devices]
    return None if any(p is None for p in prices) else sum(p or 0.0 for p in prices)


def metrics(plan: Plan, cluster: Cluster, time_s: float, energy_j: float, idle_w: float) -> Metrics:
    """The objective's view of one iteration: energy with the idle of unused devices."""
    total = energy_j + pw.energy_j(idle_w, time_s)
    hourly = _hourly(plan, cluster)
    return Metrics(
        time_s=time_s,
        samples_per_s=plan.global_batch / time_s if time_s > 0 else 0.0,
        power_w=total / time_s if time_s > 0 else 0.0,
        energy_j=total,
        dollars=None if hourly is None else pw.dollars(hourly, time_s),
        devices=len(plan.devices),
    )


def tune(
    candidates: Sequence[Candidate],
    cluster: Cluster,
    settings: TuneSettings,
    state_dir: Path,
    *,
    source: ModelSource | None = None,
    on_trial: Callable[[int, Candidate, int], Callable[[], None] | None] | None = None,
) -> TuneResult:
    """Run every candidate's trial, choose the best measured, train the remaining steps.

    ``state_dir`` receives each trial's checkpoint (``trial-<i>``) and the final one
    (``final``). ``on_trial(i, candidate, most_steps)`` is told when a run starts (trials, then
    the final one) and may return a tick callback for it (progress display). A trial that
    fails (out of memory, a dead rank) loses its candidate: its steps are not counted, and the
    next trial resumes the state before it. RunError if every trial fails."""
    if not candidates:
        raise InputError("tune: no candidate plans to try")
    trial_budget(len(candidates), settings)
    for cand in candidates:  # every candidate runnable here, before anything runs
        check_plan(cand.plan, cluster, source or source_for(cand.plan.model))
    trials: list[Trial] = []
    failed: list[str] = []
    resume = settings.resume
    used = 0
    for i, cand in enumerate(candidates):
        timed = _trial_length(settings, len(candidates) - i, settings.steps - used)
        rule = StopRule(
            rel_halfwidth=settings.rel_halfwidth,
            min_timed=settings.min_timed,
            best_s=_best_time(trials, settings),
        )
        spec = _RunSpec(
            plan=cand.plan, timed=timed, warmup=settings.warmup, resume=resume,
            checkpoint=state_dir / f"trial-{i}", rule=rule, index=i,
        )  # fmt: skip
        tick = on_trial(i, cand, timed + settings.warmup) if on_trial is not None else None
        try:
            m = _run(spec, cluster, settings, source, tick)
        except RunError as err:
            failed.append(f"trial {i + 1} ({cand.label}) failed and was dropped: {err}")
            continue
        used += m.warmup + m.steps
        resume = Path(m.checkpoint) if m.checkpoint else spec.checkpoint
        trials.append(_trial(cand, m, cluster, m.warmup + m.steps))
    if not trials:
        raise RunError("tune: every trial failed; " + "; ".join(failed))
    chosen, notes = _choose(trials, settings)
    result = TuneResult(
        trials=trials, chosen=chosen, final=None, total_steps=used, notes=failed + notes
    )
    result.predicted_scores = settings.objective.scores([t.predicted for t in trials])
    remaining = settings.steps - used
    if remaining > 0:
        winner = trials[chosen].candidate
        spec = _RunSpec(
            plan=winner.plan, timed=remaining, warmup=0, resume=resume,
            checkpoint=state_dir / "final", rule=None, index=len(candidates),
        )  # fmt: skip
        tick = on_trial(len(candidates), winner, remaining) if on_trial is not None else None
        result.final = _run(spec, cluster, settings, source, tick)
        result.total_steps += result.final.steps + result.final.warmup
    return result


@dataclass(frozen=True, kw_only=True)
class _RunSpec:
    """One run of a tune: a trial, or the winner's remaining steps."""

    plan: Plan
    timed: int
    warmup: int
    resume: Path | None
    checkpoint: Path
    rule: StopRule | None
    index: int
    """Trials 0..K-1, then K for the final run (the step log's folder)."""


def _trial_length(s: TuneSettings, left: int, steps_left: int) -> int:
    """Most timed steps of the next trial: a fair share of the steps left, one share kept for
    the winner, at least the minimum, at most ``trial_steps``."""
    share = steps_left // (left + 1) - s.warmup
    floor = s.min_timed
    ceiling = steps_left - (left - 1) * (s.warmup + s.min_timed) - s.warmup
    return max(floor, min(s.trial_steps, share, ceiling))


def _best_time(trials: Sequence[Trial], s: TuneSettings) -> float | None:
    """The best measured iteration time so far, when being slower is enough to lose."""
    if not trials or any(k not in TIME_METRICS for k in s.objective.weights):
        return None
    return min(t.measurement.measured_iteration_s for t in trials)


def _run(
    spec: _RunSpec,
    cluster: Cluster,
    s: TuneSettings,
    source: ModelSource | None,
    tick: Callable[[], None] | None,
) -> Measurement:
    training = Training(
        data=s.data,
        resume=spec.resume,
        checkpoint_dir=spec.checkpoint,
        trial=spec.rule,
        log_dir=None if s.log_dir is None else s.log_dir / str(spec.index),
        lr=s.lr,
    )
    m = measure_plan(
        spec.plan, cluster, source=source, steps=spec.timed, warmup=spec.warmup,
        timeout_s=s.timeout_s, training=training, on_tick=tick, seed=s.seed,
    )  # fmt: skip
    return with_energy(m, cluster)


def _trial(cand: Candidate, m: Measurement, cluster: Cluster, steps: int) -> Trial:
    idle = idle_watts(cand.plan, cluster, m)
    idle_predicted = idle_watts(cand.plan, cluster)
    energy = m.energy_j_per_iteration if m.energy_j_per_iteration is not None else 0.0
    return Trial(
        candidate=cand,
        measurement=with_prediction(m, cand.predicted_s, "search"),
        idle_w=idle,
        metrics=metrics(cand.plan, cluster, m.measured_iteration_s, energy, idle),
        predicted=metrics(
            cand.plan, cluster, cand.predicted_s, cand.predicted_energy_j, idle_predicted
        ),
        steps=steps,
    )


def _choose(trials: list[Trial], s: TuneSettings) -> tuple[int, list[str]]:
    """The best measured trial within the limits (the best of all, with a note, if none is)."""
    scores = s.objective.scores([t.metrics for t in trials])
    for t, score in zip(trials, scores, strict=True):
        t.score = score
        t.violations = s.limits.violations(t.metrics, s.iterations)
    ok = [i for i, t in enumerate(trials) if not t.violations]
    notes = []
    if not ok:
        notes.append("every trial broke a limit as measured; chose the best score regardless")
        ok = list(range(len(trials)))
    return min(ok, key=lambda i: trials[i].score), notes
