"""Figures as PNG files: predicted-vs-measured scatter, side-by-side Gantt charts, Pareto front.

Inputs are plain numbers and the one trace type (:class:`hetplan.planspec.trace.Span`), so any
report can draw them: ``train`` and ``bench`` draw a simulated against an executed trace with
the one :func:`gantt_chart`. Matplotlib runs on the Agg backend: no display, safe in worker
processes and CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter

from hetplan.planspec.trace import COMPUTE_KINDS, IDLE, Span
from hetplan.report.palette import KIND_COLORS

OTHER_COLOR = "#8c8c8c"
DPI = 110  # dots per inch: readable in a browser without large files


@dataclass(frozen=True, kw_only=True)
class Point:
    x: float
    y: float
    group: str
    """Legend entry (e.g. the cluster)."""


def scatter_chart(points: Sequence[Point], path: Path, *, title: str) -> Path:
    """Measured (y) against predicted (x) in ms, the y = x line and a +-20% band."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for group in sorted({p.group for p in points}):
        xs = [1e3 * p.x for p in points if p.group == group]
        ys = [1e3 * p.y for p in points if p.group == group]
        ax.scatter(xs, ys, label=group, s=28)
    hi = max([1e3 * max(p.x, p.y) for p in points], default=1.0) * 1.1
    lo = min([1e3 * min(p.x, p.y) for p in points], default=0.1) * 0.9
    line = [lo, hi]
    ax.plot(line, line, "k-", lw=1, label="measured = predicted")
    ax.fill_between(line, [0.8 * v for v in line], [1.2 * v for v in line], color="k",
                    alpha=0.08, label="±20%")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # minor-tick labels of a log axis overlap
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("predicted iteration time (ms)")
    ax.set_ylabel("measured iteration time (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _draw_lanes(
    ax: Axes, spans: Sequence[Span], rows: Sequence[tuple[str, str]], title: str
) -> None:
    """Compute full height, communication as a thin bar under its row's compute (a lane is
    a device; spans of devices not in ``rows`` and idle gaps are not drawn)."""
    lane = {device: i for i, (device, _) in enumerate(rows)}
    for s in spans:
        if s.device not in lane or s.kind == IDLE:
            continue
        color = KIND_COLORS.get(s.kind, OTHER_COLOR)
        compute = s.kind in COMPUTE_KINDS
        y, height = (lane[s.device], 0.6) if compute else (lane[s.device] + 0.38, 0.16)
        ax.barh(y, 1e3 * s.duration, left=1e3 * s.start, height=height, color=color,
                edgecolor="white", linewidth=0.5)  # fmt: skip
        if compute and s.microbatch >= 0 and s.duration > 0:
            ax.text(1e3 * (s.start + s.end) / 2, lane[s.device], str(s.microbatch), ha="center",
                    va="center", fontsize=6, color="white")  # fmt: skip
    ax.set_yticks(range(len(rows)), [label for _, label in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time in the step (ms)")
    ax.set_title(title, fontsize=10)


def gantt_chart(
    simulated: Sequence[Span],
    measured: Sequence[Span],
    rows: Sequence[tuple[str, str]],
    path: Path,
    *,
    title: str,
    measured_title: str = "executed (runtime trace, last timed step)",
) -> Path:
    """Simulated (left) and measured (right) traces of one plan on a shared time axis; ``rows``:
    (device id, row label), top to bottom."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.8 + 0.6 * len(rows)), sharex=True,
                             sharey=True)  # fmt: skip
    _draw_lanes(axes[0], simulated, rows, "simulated")
    _draw_lanes(axes[1], measured, rows, measured_title)
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in KIND_COLORS.values()]
    fig.legend(handles, list(KIND_COLORS), loc="lower center", fontsize=8, ncol=len(KIND_COLORS),
               bbox_to_anchor=(0.5, 0.0))  # fmt: skip
    fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    return _save(fig, path, rect=(0, 0.1, 1, 0.95))


def pareto_chart(points: Sequence[tuple[float, float, bool]], path: Path, *, title: str) -> Path:
    """Every candidate's (time s, energy J) and the Pareto front (``True`` points) as a line."""
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    xs = [1e3 * t for t, _, front in points if not front]
    ys = [e for _, e, front in points if not front]
    ax.scatter(xs, ys, s=18, color=OTHER_COLOR, label="ranked candidates")
    front = sorted((1e3 * t, e) for t, e, f in points if f)
    ax.plot([p[0] for p in front], [p[1] for p in front], "o-", color="#c44e52",
            label="Pareto front")  # fmt: skip
    ax.set_xlabel("predicted iteration time (ms)")
    ax.set_ylabel("predicted energy per iteration (J)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Figure, path: Path, rect: tuple[float, float, float, float] | None = None) -> Path:
    """Write ``fig``; ``rect``: the part of the figure the axes may use (room for a legend)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
