"""Plain results of a suite run (JSON round-trip through :mod:`hetplan.serde`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetplan.planspec.trace import Span

PLANNER = "planner"
"""Strategy label of the planner's own pick."""


@dataclass(frozen=True, kw_only=True)
class RankMemory:
    """One rank's peak memory: predicted against measured (bytes)."""

    rank: int
    device: str
    """The cluster device id the rank ran on."""
    predicted_bytes: float | None
    """The prediction's peak memory of the rank's device less its ``framework`` allowance
    (the fixed CUDA context / allocator reserve, which neither the CPU tensor-byte count nor
    the CUDA allocator's peak sees); None where the prediction has no such device."""
    measured_bytes: int
    """Peak of the first (untimed) step: live tensor bytes on CPU, allocator peak on CUDA."""
    source: str
    """How it was measured (``tensor bytes`` or ``cuda.max_memory_allocated``)."""


@dataclass(kw_only=True)
class CaseResult:
    """One model x cluster x strategy: predicted against measured iteration time."""

    model: str
    cluster: str
    strategy: str
    """dp, gpipe, 1f1b, hybrid or ``planner``."""
    label: str
    """What the plan is (:func:`hetplan.bench.plans.plan_label`)."""
    ranks: int
    predicted_s: float
    measured_s: float
    measured_p10_s: float
    measured_p90_s: float
    plan: dict[str, Any]
    """The plan as data (``hetplan train`` reads it back)."""
    rounds_s: list[float] = field(default_factory=list)
    """Each round's step time (:mod:`hetplan.bench.rounds`; ``measured_s`` is their median);
    empty in results saved before rounds."""
    planner_strategy: str | None = None
    """For the planner's pick: the family it chose."""
    search_s: float | None = None
    """Seconds the planner's search took (planner cases)."""
    simulated: list[Span] = field(default_factory=list)
    """The simulated compute spans of iteration 0 (the one trace type)."""
    measured: list[Span] = field(default_factory=list)
    """The executed compute spans of the last timed step."""
    memory: list[RankMemory] = field(default_factory=list)
    """Per rank peak memory (empty in results saved before memory was recorded)."""
    predicted_analytical_s: float | None = None
    """The same plan predicted without per-layer profiles: the analytical model on the
    device's calibration (``hetplan calibrate``); None in results saved before."""
    analytical_source: str = ""
    """What priced the layers of that prediction (``calibrated on cpu`` or ``analytical``)."""

    @property
    def error(self) -> float:
        """(measured - predicted) / predicted."""
        return (self.measured_s - self.predicted_s) / self.predicted_s

    @property
    def analytical_error(self) -> float | None:
        """(measured - predicted) / predicted of the profile-free prediction."""
        p = self.predicted_analytical_s
        return None if p is None else (self.measured_s - p) / p


@dataclass(frozen=True, kw_only=True)
class PlannerTiming:
    """How long one search took against the problem's size."""

    model: str
    layers: int
    devices: int
    seconds: float
    candidates: int


@dataclass(frozen=True, kw_only=True)
class ParetoPoint:
    time_s: float
    energy_j: float
    label: str
    on_front: bool


@dataclass(kw_only=True)
class SuiteResult:
    """Everything a suite run measured, and where it ran."""

    quick: bool
    steps: int
    warmup: int
    cases: list[CaseResult]
    rounds: int = 1
    """Times each plan was measured (:mod:`hetplan.bench.rounds`; 1 in results saved before)."""
    planner_timings: list[PlannerTiming] = field(default_factory=list)
    pareto_model: str = ""
    pareto: list[ParetoPoint] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)
    """CPU, cores, torch version, load average before and after."""
    command: str = ""
    notes: list[str] = field(default_factory=list)
