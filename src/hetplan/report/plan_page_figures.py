"""The plan page's plotly figures: Gantt chart, memory against capacity, time-energy scatter.

Plotly is imported inside each function, never at module import (the CLI must start fast).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hetplan.report import gantt
from hetplan.report.gantt import LEGEND, MARGIN
from hetplan.report.plan_page_data import GanttData, MemoryRow, ParetoPoint

# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from plotly.graph_objects import Figure


def gantt_figure(g: GanttData) -> Figure:
    """The simulated iteration: one panel of the one Gantt chart (:mod:`.gantt`)."""
    steady = "time since the start of the simulated iterations (ms)"
    return gantt.gantt_figure(
        g.rows, [gantt.Panel(title="", bars=g.bars)], kinds=g.kinds, window=g.window,
        xlabel="time in the iteration (ms)" if g.window is None else steady,
    )  # fmt: skip


def _gb(n: float) -> float:
    return n / 1e9


def _share(r: MemoryRow) -> str:
    """Used / capacity in percent, one decimal for small shares."""
    if r.capacity_bytes <= 0:
        return "no capacity"
    pct = 100 * r.used_bytes / r.capacity_bytes
    return f"{pct:.1f} %" if pct < 10 else f"{pct:.0f} %"


def _memory_hover(r: MemoryRow) -> str:
    lines = [
        f"<b>{html.escape(r.device)}</b> ({html.escape(r.type)}, {html.escape(r.role)})",
        f"predicted {_gb(r.used_bytes):.3f} GB of {_gb(r.capacity_bytes):.3f} GB ({_share(r)})",
    ]
    lines += [f"{k}: {_gb(v):.3f} GB" for k, v in r.breakdown.items() if v > 0]
    return "<br>".join(lines)


def memory_figure(rows: Sequence[MemoryRow]) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    for over, name, color in ((False, "fits", "#4c72b0"), (True, "over capacity", "#c62828")):
        sel = [r for r in rows if r.over == over]
        fig.add_trace(
            go.Bar(
                name=f"predicted memory ({name})",
                x=[r.device for r in sel],
                y=[_gb(r.used_bytes) for r in sel],
                marker={"color": color},
                text=[_share(r) for r in sel],
                textposition="outside",
                cliponaxis=False,
                hovertext=[_memory_hover(r) for r in sel],
                hoverinfo="text",
                showlegend=True,
            )
        )
    tick = max(8, min(28, 900 // max(len(rows), 1)))  # capacity marker width, px
    fig.add_trace(
        go.Scatter(
            name="capacity",
            x=[r.device for r in rows],
            y=[_gb(r.capacity_bytes) for r in rows],
            mode="markers",
            marker={"symbol": "line-ew", "size": tick, "line": {"width": 3, "color": "#222"}},
            hovertemplate="%{x}: capacity %{y:.3f} GB<extra></extra>",
        )
    )
    fig.update_layout(
        barmode="overlay",
        height=380,
        margin=MARGIN,
        legend=LEGEND,
        xaxis={
            "title": {"text": "device"},
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [r.device for r in rows],
        },
        yaxis={"title": {"text": "memory (GB)"}, "rangemode": "tozero"},
        plot_bgcolor="white",
    )
    fig.update_yaxes(showgrid=True, gridcolor="#eee")
    return fig


def _pareto_hover(p: ParetoPoint) -> str:
    return f"{html.escape(p.label)}<br>{1e3 * p.time_s:.3f} ms, {p.energy_j:.3f} J"


def pareto_figure(points: Sequence[ParetoPoint], chosen: ParetoPoint | None) -> Figure:
    import plotly.graph_objects as go

    fig = go.Figure()
    rest = [p for p in points if not p.on_front]
    front = sorted((p for p in points if p.on_front), key=lambda p: (p.time_s, p.energy_j))
    groups: list[tuple[str, list[ParetoPoint], dict[str, Any]]] = [
        ("other candidates", rest, {"mode": "markers", "marker": {"color": "#9e9e9e"}}),
        ("Pareto front", front, {"mode": "lines+markers", "marker": {"color": "#c44e52"}}),
    ]
    if chosen is not None:
        star = {"symbol": "star", "size": 18, "color": "#f0b400", "line": {"color": "#222"}}
        groups.append(("this plan", [chosen], {"mode": "markers", "marker": star}))
    for name, sel, style in groups:
        fig.add_trace(
            go.Scatter(
                name=name,
                x=[1e3 * p.time_s for p in sel],
                y=[p.energy_j for p in sel],
                hovertext=[_pareto_hover(p) for p in sel],
                hoverinfo="text",
                **style,
            )
        )
    fig.update_layout(
        height=460,
        margin=MARGIN,
        legend=LEGEND,
        xaxis={"title": {"text": "predicted iteration time (ms)"}},
        yaxis={"title": {"text": "predicted energy per iteration (J)"}},
        plot_bgcolor="white",
    )
    fig.update_xaxes(showgrid=True, gridcolor="#eee")
    fig.update_yaxes(showgrid=True, gridcolor="#eee")
    return fig
