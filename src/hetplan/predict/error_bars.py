"""How far to trust a predicted iteration time: an interval from hetplan's own measured error.

Every run that compares a prediction with a measurement (``hetplan train``, each ``tune``
trial) appends one :class:`ErrorRecord` to ``error-history.jsonl`` in the profile store: the
ratio measured / predicted, what priced the prediction (its cost source, reduced to a
:data:`SOURCE_CLASSES` class), the kind of devices (cpu, gpu, mixed) and the strategy family.

:meth:`ErrorModel.interval` gives a prediction an interval meant to hold the measured time
with probability :data:`COVERAGE`. From the records most like the prediction (same source
class, device kind and family; else same source and kind; else same kind) once there are
:data:`MIN_RECORDS`: the split-conformal interval of their log-ratios (the ``ceil((n + 1)(1 +
c) / 2)``-th order statistics, which hold a new exchangeable ratio with probability >= c).
Without enough records, :data:`DEFAULT_BANDS`: the errors docs/benchmarks.md reports.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetplan.units import fmt_seconds

if TYPE_CHECKING:
    from hetplan.predict.predict import Prediction

HISTORY_FILE = "error-history.jsonl"
COVERAGE = 0.8  # the intended probability that a measurement falls inside its interval
MIN_RECORDS = math.ceil((1 + COVERAGE) / (1 - COVERAGE)) - 1
"""Records below which the conformal interval is unbounded at :data:`COVERAGE` (the order
statistic ``ceil((n + 1)(1 + c) / 2)`` exceeds ``n``): 9 at 80%."""
SOURCE_CLASSES = ("profiled", "learned", "calibrated", "transferred", "catalog")
"""What priced a prediction, most trusted first (a prediction priced by several counts as its
least trusted)."""
DEFAULT_BANDS: dict[tuple[str, str], tuple[float, float]] = {
    # measured / predicted, 80% band, where no history exists. GPU figures: the three H100
    # `train` runs of docs/benchmarks.md, "Predicting models nobody profiled on a GPU",
    # session 41 (own profile less its hooks 0.999 / 1.022 / 1.127; learned from the other
    # five models 1.138 / 0.883 / 1.081; calibrated on stream 0.859 / 0.679 / 0.777); catalog
    # analytical 1.3-3x off ("Analytical model against a real GPU (H100)"); rounded outwards.
    ("profiled", "gpu"): (0.95, 1.15),
    ("learned", "gpu"): (0.85, 1.2),
    ("calibrated", "gpu"): (0.6, 1.05),
    ("catalog", "gpu"): (0.75, 3.0),
    # Transferred from another GPU type (`scaled from <type>`, `learned on <ref>, scaled to
    # <type> by specs`): docs/benchmarks.md, "Pricing a GPU type nobody measured", each of six
    # types priced from stores without it, the whole forward of three models at four sizes:
    # measured / predicted p10-p90 0.83-1.35 (own profile elsewhere) and 0.79-1.53 (never
    # profiled) in fp16, 0.74-1.32 and 0.72-1.52 in fp32; the H100's three `train` steps from
    # no Hopper data 1.13 / 1.39 / 1.33. Rounded outwards.
    ("transferred", "gpu"): (0.7, 1.55),
    # CPU: the quick suite re-predicted on the same runs, median |error| 27.8%, p90 86.4%
    # ("CPU pipelines: transfers on the ranks' cores"); the shared machine's drift dominates.
    ("profiled", "cpu"): (0.7, 1.9),
    ("learned", "cpu"): (0.7, 1.9),
    ("calibrated", "cpu"): (0.7, 1.9),
    ("transferred", "cpu"): (0.7, 1.9),  # never measured: the other CPU sources' band
    ("catalog", "cpu"): (0.6, 2.5),
}
"""Bands of the ``mixed`` kind: the wider of the cpu and gpu bands of the source."""


@dataclass(frozen=True, kw_only=True)
class ErrorRecord:
    """One measured run against its prediction."""

    source: str
    """Source class (:data:`SOURCE_CLASSES`)."""
    kind: str
    """``cpu``, ``gpu`` or ``mixed``: the devices of the plan."""
    family: str
    """The plan's strategy."""
    predicted_s: float
    measured_s: float
    origin: str = "train"
    """``train``, ``tune`` or ``bench``: the command that measured it."""
    when: float = 0.0
    """Unix time of the record."""

    @property
    def key(self) -> tuple[str, str, str]:
        """(kind, source, family): what the intervals group records by, broadest first."""
        return (self.kind, self.source, self.family)

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured_s / self.predicted_s)


@dataclass(frozen=True, kw_only=True)
class Interval:
    """Where the measured iteration time should fall, with probability ``coverage``."""

    low_s: float
    high_s: float
    coverage: float
    basis: str
    """What it comes from, in words (``12 measured runs: calibrated, cpu, dp``)."""

    def holds(self, seconds: float) -> bool:
        return self.low_s <= seconds <= self.high_s

    def overlaps(self, other: Interval) -> bool:
        return self.low_s <= other.high_s and other.low_s <= self.high_s

    def text(self) -> str:
        return f"{fmt_seconds(self.low_s)}-{fmt_seconds(self.high_s)}"


_LABEL_START = re.compile(r"(?:^|, )(measured|learned|calibrated|analytical|scaled from)\b")
_CLASS_OF = {
    "measured": "profiled",
    "learned": "learned",
    "calibrated": "calibrated",
    "scaled from": "transferred",
}
_BY_SPECS = "by specs"
"""How a learned label ends where another type's fit priced it (``cost.learned_compute``)."""


def source_class(cost_source: str) -> str:
    """The least trusted class among a prediction's cost sources: labels joined by ", " that
    start ``measured on``, ``learned on`` (which may hold a comma of its own: ``learned on
    A100, scaled to T4 by specs``, transferred), ``scaled from`` (a profile of another type,
    transferred), ``calibrated on`` or ``analytical``."""
    starts = list(_LABEL_START.finditer(cost_source))
    found = set()
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(cost_source)
        label = cost_source[m.start() : end]
        kind = _CLASS_OF.get(m.group(1), "catalog")
        found.add("transferred" if kind == "learned" and _BY_SPECS in label else kind)
    return max(found, key=SOURCE_CLASSES.index) if found else "catalog"


def device_kind(type_names: Sequence[str]) -> str:
    """``cpu``, ``gpu`` or ``mixed`` from the catalog type names of a plan's devices (CPU
    types are named ``cpu...``, as :func:`hetplan.cost.memory.is_gpu` reads them)."""
    cpu = {name.lower().startswith("cpu") for name in type_names}
    return "mixed" if len(cpu) > 1 else ("cpu" if cpu == {True} else "gpu")


def record_of(pred: Prediction, measured_s: float, origin: str) -> ErrorRecord:
    """The record of ``pred`` measured at ``measured_s`` seconds per iteration."""
    return ErrorRecord(
        source=source_class(pred.cost_source),
        kind=device_kind([d.type for d in pred.devices]),
        family=pred.strategy,
        predicted_s=pred.iteration_time_s,
        measured_s=measured_s,
        origin=origin,
        when=time.time(),
    )


def append_record(directory: Path, record: ErrorRecord) -> None:
    """Append ``record`` to the history in ``directory`` (created if missing)."""
    if not (record.predicted_s > 0 and record.measured_s > 0):
        return  # nothing to learn from a zero or missing figure
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / HISTORY_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(record)) + "\n")


def load_history(directory: Path) -> list[ErrorRecord]:
    """The records in ``directory`` (lines that do not parse are skipped); [] without a file."""
    try:
        lines = (directory / HISTORY_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [r for r in map(_parse, lines) if r is not None]


def _parse(line: str) -> ErrorRecord | None:
    try:
        raw: Any = json.loads(line)
        rec = ErrorRecord(**raw)
    except (ValueError, TypeError):
        return None
    return rec if rec.predicted_s > 0 and rec.measured_s > 0 else None


def conformal_band(log_ratios: Sequence[float], coverage: float) -> tuple[float, float] | None:
    """The split-conformal band of measured / predicted from past log-ratios: their
    ``k = ceil((n + 1)(1 + c) / 2)``-th smallest and largest; None when ``k > n``."""
    n = len(log_ratios)
    k = math.ceil((n + 1) * (1 + coverage) / 2)
    if k > n:
        return None
    ordered = sorted(log_ratios)
    return math.exp(ordered[n - k]), math.exp(ordered[k - 1])


@dataclass(frozen=True)
class ErrorModel:
    """Intervals from a history of records (empty: the defaults)."""

    history: tuple[ErrorRecord, ...] = ()
    coverage: float = COVERAGE

    @classmethod
    def load(cls, directory: Path) -> ErrorModel:
        return cls(tuple(load_history(directory)))

    def interval(self, pred: Prediction) -> Interval:
        """The interval of ``pred``'s iteration time."""
        source = source_class(pred.cost_source)
        kind = device_kind([d.type for d in pred.devices])
        return self.interval_for(pred.iteration_time_s, source, kind, pred.strategy)

    def interval_for(self, predicted_s: float, source: str, kind: str, family: str) -> Interval:
        """From the records of the same device kind, source class and family; else kind and
        source; else kind; else the default band."""
        want = (kind, source, family)
        for depth in (3, 2, 1):
            ratios = [r.log_ratio for r in self.history if r.key[:depth] == want[:depth]]
            band = conformal_band(ratios, self.coverage)
            if band is not None:
                name = ", ".join(want[:depth])
                return self._interval(predicted_s, band, f"{len(ratios)} measured runs: {name}")
        band = default_band(source, kind)
        return self._interval(predicted_s, band, f"no history; default for {source} on {kind}")

    def _interval(self, predicted_s: float, band: tuple[float, float], basis: str) -> Interval:
        lo, hi = band
        return Interval(
            low_s=predicted_s * lo, high_s=predicted_s * hi, coverage=self.coverage, basis=basis
        )


def default_band(source: str, kind: str) -> tuple[float, float]:
    """:data:`DEFAULT_BANDS` of ``(source, kind)``; ``mixed``: the wider of cpu and gpu."""
    if kind != "mixed":
        return DEFAULT_BANDS[(source, kind)]
    cpu, gpu = DEFAULT_BANDS[(source, "cpu")], DEFAULT_BANDS[(source, "gpu")]
    return min(cpu[0], gpu[0]), max(cpu[1], gpu[1])


def ties_with_best(intervals: Sequence[Interval]) -> list[bool]:
    """Per ranked plan (best first), whether its interval overlaps the best's: a measurement
    could show it as fast as the best or faster, so the ranking cannot tell them apart."""
    if not intervals:
        return []
    best = intervals[0]
    return [i > 0 and iv.overlaps(best) for i, iv in enumerate(intervals)]


def with_interval(pred: Prediction, model: ErrorModel) -> Prediction:
    """``pred`` with its :class:`Interval`."""
    return dataclasses.replace(pred, interval=model.interval(pred))


TIME_OBJECTIVES = ("time", "throughput")
"""Objectives whose ranking the intervals of the iteration time can judge."""


def ties_under(objective: str, intervals: Sequence[Interval | None]) -> list[bool]:
    """:func:`ties_with_best` under a time objective with every interval known; else none."""
    known = [iv for iv in intervals if iv is not None]
    if objective not in TIME_OBJECTIVES or len(known) < len(intervals):
        return [False] * len(intervals)
    return ties_with_best(known)
