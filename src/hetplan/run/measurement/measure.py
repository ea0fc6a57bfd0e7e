"""What a run measured: step times after warm-up, per-rank compute and waiting, peak memory.

Per rank and step: ``step_s`` (zero_grad to the end of the optimizer step), ``forward_s`` and
``backward_s`` (the stage's own compute, from hooks; see :mod:`hetplan.run.timing`),
``optimizer_s``, and ``wait_s = step_s - forward_s - backward_s - optimizer_s``: time spent in
communication that compute did not hide and in waiting (pipeline bubbles, slower peers).
The iteration time of a step is the slowest rank's step time; ``measured_iteration_s`` is the
median over the timed steps, with the 10th and 90th percentiles as its spread.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetplan.planspec import Plan
from hetplan.planspec.trace import Span, TraceComparison, compare, shifted
from hetplan.run.loop.job import RankResult
from hetplan.serde import to_data, write_json_atomic

DEFAULT_OUT_DIR = Path("out")


@dataclass(kw_only=True)
class RankFigures:
    """One rank's medians over the timed steps (seconds) and its peak memory."""

    rank: int
    device: str
    pipeline: int
    stage: int
    step_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    wait_s: float
    """Communication not hidden by compute, plus waiting (bubbles, slower peers)."""
    peak_memory_bytes: int
    memory_source: str
    """``cuda.max_memory_allocated`` or ``tensor bytes`` (CPU: live tensor storages, see
    :mod:`hetplan.run.meters.step_memory`)."""
    predicted_memory_bytes: int | None = None
    """The prediction's peak memory of this rank's device without its framework allowance
    (which neither the CUDA allocator's peak nor the CPU tensor count can see)."""
    actions: list[Span] = field(default_factory=list)
    """The spans of the last timed step, seconds from the earliest start of that step among
    the ranks of this rank's host."""
    timing: str = "host clock"
    """How the spans were timed: ``cuda events`` (device time) or ``host clock``."""
    last_step: tuple[float, float] = (0.0, 0.0)
    """Start and end of the last timed step on the time axis of :attr:`actions`: its spans
    and their :func:`~hetplan.planspec.trace.idle_gaps` add up to it."""
    energy_j: float | None = None
    """This rank's meter advance per timed step, joules: the advance over the timed window
    (opened at the first timed step, closed after the last, the device synchronised at both
    ends) divided by its steps (None: no meter; a RAPL reading covers the node's CPU
    packages, an NVML one this rank's GPU)."""
    energy_source: str | None = None
    """``nvml`` or ``rapl`` where the rank read a meter."""
    energy_window_s: float | None = None
    """Wall seconds of the timed window (the steps and the host's work between them)."""
    power_w: float | None = None
    """Mean power over the timed window, watts: the meter's advance / the window's seconds."""
    power_limit_w: float | None = None
    """The GPU's enforced power limit as NVML reported it, watts (None: not known)."""
    compute_spread: float | None = None
    """p90/p10 of the rank's forward + backward time over the timed steps (None: no positive
    p10, or a measurement written before it was kept): how steady what write-back stores is."""


@dataclass(kw_only=True)
class Measurement:
    """A measured run of a plan, side by side with its prediction where there is one."""

    plan: Plan
    cluster: str | None
    steps: int
    warmup: int
    measured_iteration_s: float
    """Median over timed steps of the slowest rank's step time."""
    iteration_p10_s: float
    iteration_p90_s: float
    iteration_s: list[float]
    """Every timed step's iteration time."""
    loss: list[float]
    """Global-batch mean loss of every step (warm-up included)."""
    ranks: list[RankFigures]
    predicted_iteration_s: float | None = None
    relative_error: float | None = None
    """(measured - predicted) / predicted."""
    prediction_source: str = ""
    """What the prediction used (compute model), or why there is none."""
    notes: list[str] = field(default_factory=list)
    first_step: int = 0
    """Global index of the run's first step (a resumed run starts at its checkpoint's)."""
    stopped: str | None = None
    """Why a trial ended before its last step (None: it ran every step)."""
    checkpoint: str | None = None
    """The checkpoint written at the end of the run, if any."""
    trace_comparison: TraceComparison | None = None
    """The executed last step against the simulated iteration, per device and kind of action
    (:func:`hetplan.planspec.trace.compare`)."""
    energy_j_per_iteration: float | None = None
    """Energy of one iteration, joules (all plan devices): the meters' advance over the timed
    steps divided by their number."""
    predicted_energy_j_per_iteration: float | None = None
    """The prediction's energy per iteration (plan devices only), joules."""
    energy_source: str = ""
    """``measured (nvml)``, ``measured (rapl)`` or ``modelled (...)``: how the energy was got."""
    energy_invalid: str | None = None
    """Why the metered energy was rejected, with its figures (None: accepted or not metered);
    a rejected reading is replaced by the model and never enters a power fit."""


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of a non-empty list, q in [0, 100]."""
    return float(np.percentile(values, q))


def summarize(
    plan: Plan, raw: list[RankResult], *, warmup: int, cluster: str | None = None
) -> Measurement:
    """Build the Measurement from the ranks' results (see :func:`hetplan.run.loop.worker`)."""
    total = len(raw[0].step_s)
    timed = range(warmup, total)
    iteration = [max(r.step_s[i] for r in raw) for i in timed]
    loss = [sum(x for r in raw if (x := r.loss[i]) is not None) for i in range(total)]
    return Measurement(
        plan=plan,
        cluster=cluster,
        steps=len(iteration),
        warmup=warmup,
        measured_iteration_s=statistics.median(iteration),
        iteration_p10_s=percentile(iteration, 10),
        iteration_p90_s=percentile(iteration, 90),
        iteration_s=iteration,
        loss=loss,
        ranks=[_rank_figures(r, warmup, _origin(raw, r.host)) for r in raw],
        first_step=raw[0].first_step,
        stopped=raw[0].stopped,
        checkpoint=next((r.checkpoint for r in raw if r.checkpoint), None),
        **_measured_energy(raw, warmup),
    )


def _measured_energy(raw: list[RankResult], warmup: int) -> dict[str, Any]:
    """Energy per iteration where meters covered every device: each GPU rank its own (NVML),
    CPU ranks one package reading per node (RAPL, local rank 0). Empty otherwise."""
    del warmup  # the window opened at the first timed step
    gpu = [r for r in raw if r.device_kind.startswith("cuda")]
    metered = [r for r in raw if _window(r) is not None]
    if not metered or any(_window(r) is None for r in gpu):
        return {}
    if len(metered) == len(gpu) and len(gpu) < len(raw):  # CPU ranks without a package meter
        return {}
    per_step = [w[0] / w[2] for r in metered if (w := _window(r)) is not None]
    sources = sorted({str(r.energy_source) for r in metered})
    return {  # each counter's advance over its timed window, per timed step
        "energy_j_per_iteration": sum(per_step),
        "energy_source": f"measured ({', '.join(sources)})",
    }


def _window(r: RankResult) -> tuple[float, float, int] | None:
    """A rank's energy window (joules, wall seconds, timed steps), None without one."""
    w = r.energy_window
    if w is None or int(w[2]) < 1 or not float(w[1]) > 0:
        return None
    return float(w[0]), float(w[1]), int(w[2])


def _rank_energy(r: RankResult) -> dict[str, Any]:
    """A rank's metered energy per timed step and mean power over its window."""
    w = _window(r)
    if w is None:
        return {}
    joules, seconds, steps = w
    return {
        "energy_j": joules / steps,
        "energy_window_s": seconds,
        "power_w": joules / seconds,
        "power_limit_w": r.power_limit_w,
    }


def _origin(raw: list[RankResult], host: str | None = None) -> float:
    """The earliest start of the last step (perf_counter seconds) among the ranks of ``host``
    (its own clock: machines' perf_counter origins are unrelated), 0 if not recorded. Ranks
    of different hosts are aligned by their hosts' first start of that step, which the
    previous step's collectives keep within about a message latency."""
    same = [r for r in raw if r.host == host]
    return min((r.last_step_start for r in same), default=0.0)


def _rank_figures(r: RankResult, warmup: int, origin: float = 0.0) -> RankFigures:
    def med(values: list[float]) -> float:
        return float(statistics.median(values[warmup:]))

    waits = [
        s - f - b - o
        for s, f, b, o in zip(r.step_s, r.forward_s, r.backward_s, r.optimizer_s, strict=True)
    ][warmup:]
    end = origin if r.last_step_end is None else r.last_step_end
    return RankFigures(
        rank=r.rank,
        device=r.device,
        pipeline=r.pipeline,
        stage=r.stage,
        step_s=med(r.step_s),
        forward_s=med(r.forward_s),
        backward_s=med(r.backward_s),
        optimizer_s=med(r.optimizer_s),
        wait_s=statistics.median(waits),
        peak_memory_bytes=r.peak_memory_bytes,
        memory_source=r.memory_source,
        actions=shifted(r.actions, origin),
        timing=r.timing,
        last_step=(r.last_step_start - origin, end - origin),
        energy_source=r.energy_source,
        **_rank_energy(r),
        compute_spread=_ratio_p90_p10(
            [f + b for f, b in zip(r.forward_s, r.backward_s, strict=True)][warmup:]
        ),
    )


def _ratio_p90_p10(values: list[float]) -> float | None:
    low = percentile(values, 10) if values else 0.0
    return percentile(values, 90) / low if low > 0 else None


def with_prediction(m: Measurement, predicted_s: float | None, source: str) -> Measurement:
    """``m`` with the predicted iteration time and the relative error filled in."""
    m.predicted_iteration_s = predicted_s
    m.prediction_source = source
    if predicted_s is not None and predicted_s > 0:
        m.relative_error = (m.measured_iteration_s - predicted_s) / predicted_s
    return m


def with_trace(m: Measurement, simulated: list[Span]) -> Measurement:
    """``m`` with its executed spans compared to the simulated iteration 0's."""
    executed = [a for r in m.ranks for a in r.actions]
    m.trace_comparison = compare([s for s in simulated if s.iteration == 0], executed)
    return m


def with_predicted_memory(m: Measurement, per_device: dict[str, float]) -> Measurement:
    """``m`` with each rank's predicted peak memory (bytes, by device id) filled in."""
    for r in m.ranks:
        if r.device in per_device:
            r.predicted_memory_bytes = int(per_device[r.device])
    return m


def memory_error(r: RankFigures) -> float | None:
    """(measured - predicted) / predicted peak memory of one rank; None without both."""
    if r.predicted_memory_bytes is None or r.predicted_memory_bytes <= 0:
        return None
    return (r.peak_memory_bytes - r.predicted_memory_bytes) / r.predicted_memory_bytes


def default_path(plan: Plan) -> Path:
    """``out/measure-<model>-<strategy>-<ranks>.json``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in plan.model.name)
    return DEFAULT_OUT_DIR / f"measure-{safe}-{plan.strategy}-{len(plan.devices)}.json"


def save_measurement(m: Measurement, path: Path) -> Path:
    """Write ``m`` as JSON (atomically), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(m))
    return path
