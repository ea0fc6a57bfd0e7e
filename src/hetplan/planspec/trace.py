"""The one trace type: an action with a start and an end, simulated or executed.

The simulator (:meth:`hetplan.simulate.timeline.Timeline.spans`) and the runtime
(:class:`hetplan.run.execute.executor.Executor`) both produce :class:`Span`; every consumer (the
``train`` chart, the plan page, ``bench``, the write-back, the measurement) reads it, and
:func:`compare` is the one comparison of a simulated trace with a measured one. A leaf, like
the rest of :mod:`hetplan.planspec`: plain numbers and strings.

Times are seconds. A simulated span counts from the schedule's start; an executed one from the
earliest start of its step among the ranks of its host (see
:mod:`hetplan.run.measurement.measure`). On
CUDA the executed times are device times (CUDA events on the rank's stream), on CPU the host's
``perf_counter``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMPUTE_KINDS = frozenset({"fwd", "bwd", "optimizer"})
"""Kinds that occupy a device's compute stream; the others are communication."""
IDLE = "idle"
"""Kind of a gap on a rank's compute stream: nothing of the step ran there (waiting for a
peer, a bubble, communication not hidden, or the host not issuing work fast enough)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Span:
    """One action of one device in one step: what ran, where, from when to when."""

    device: str
    """The cluster device id (the row of a Gantt chart)."""
    kind: str
    """``fwd``, ``bwd``, ``optimizer``, ``send``, ``recv`` (the receiving end of a send, from
    posting to arrival), ``allreduce``, ``tie``, ``ps_push``, ``ps_pull`` or :data:`IDLE`."""
    stage: int = -1
    microbatch: int = -1
    part: int = -1
    """Backward part (split at gradient-bucket boundaries) or allreduce bucket; -1: whole."""
    start: float
    end: float
    pipeline: int = 0
    iteration: int = 0
    peer: str | None = None
    """The other end of a send (simulated traces)."""

    @property
    def duration(self) -> float:
        return self.end - self.start


def shifted(spans: Iterable[Span], origin: float) -> list[Span]:
    """``spans`` with ``origin`` subtracted from their times."""
    return [_with_times(s, s.start - origin, s.end - origin) for s in spans]


def _with_times(s: Span, start: float, end: float) -> Span:
    return Span(
        device=s.device, kind=s.kind, stage=s.stage, microbatch=s.microbatch, part=s.part,
        start=start, end=end, pipeline=s.pipeline, iteration=s.iteration, peer=s.peer,
    )  # fmt: skip


def busy(spans: Iterable[Span], kinds: frozenset[str] = COMPUTE_KINDS) -> float:
    """Seconds covered by the spans of ``kinds`` (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted((s.start, s.end) for s in spans if s.kind in kinds):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def idle_gaps(spans: Sequence[Span], start: float, end: float, device: str) -> list[Span]:
    """The gaps of ``device``'s compute stream in ``[start, end]``: with them, the compute
    spans of a step add up to the step exactly (``busy + sum(gaps) == end - start``)."""
    gaps: list[Span] = []
    reach = start
    for s0, s1 in sorted((s.start, s.end) for s in spans if s.kind in COMPUTE_KINDS):
        if s0 > reach:
            gaps.append(Span(device=device, kind=IDLE, start=reach, end=min(s0, end)))
        reach = max(reach, s1)
    if reach < end:
        gaps.append(Span(device=device, kind=IDLE, start=reach, end=end))
    return gaps


@dataclass(frozen=True, kw_only=True)
class KindError:
    """Simulated against measured seconds of one kind of action on one device."""

    device: str
    kind: str
    simulated_s: float
    measured_s: float

    @property
    def relative_error(self) -> float | None:
        """(measured - simulated) / simulated; None where nothing was simulated."""
        if self.simulated_s <= 0:
            return None
        return (self.measured_s - self.simulated_s) / self.simulated_s


@dataclass(frozen=True, kw_only=True)
class TraceComparison:
    """What a measured trace says of the simulated one, per device and kind of action."""

    rows: list[KindError]
    simulated_end_s: float
    measured_end_s: float
    median_abs_error: float | None
    """Median over rows of |relative error| (rows with a simulated time)."""


def compare(simulated: Sequence[Span], measured: Sequence[Span]) -> TraceComparison:
    """Per (device, kind): summed durations simulated against measured, and the traces' ends.

    Summed, not matched action by action: a run's schedule and the simulated one may split the
    same work differently (bucketed backward parts, sends posted early), while the total time
    a device spends forward, backward or communicating is what a prediction must get right."""
    keys = sorted({(s.device, s.kind) for s in [*simulated, *measured] if s.kind != IDLE})
    rows = [
        KindError(
            device=d, kind=k,
            simulated_s=sum(s.duration for s in simulated if (s.device, s.kind) == (d, k)),
            measured_s=sum(s.duration for s in measured if (s.device, s.kind) == (d, k)),
        )
        for d, k in keys
    ]  # fmt: skip
    errors = [abs(e) for r in rows if (e := r.relative_error) is not None]
    return TraceComparison(
        rows=rows,
        simulated_end_s=max((s.end for s in simulated), default=0.0),
        measured_end_s=max((s.end for s in measured), default=0.0),
        median_abs_error=statistics.median(errors) if errors else None,
    )
