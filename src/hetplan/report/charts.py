"""Figures as PNG files: predicted-vs-measured scatter, side-by-side Gantt charts, Pareto front.

Inputs are plain numbers, so any report can draw them (Gantt charts of traces are
:mod:`hetplan.report.gantt`'s, interactive). Matplotlib runs on the Agg backend: no display,
safe in worker processes and CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

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
