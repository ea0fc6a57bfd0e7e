"""The one Gantt chart: traces of :class:`~hetplan.planspec.trace.Span` drawn with plotly.

The plan page draws its simulated iteration with it (one panel), ``train`` and ``bench`` the
simulated iteration above the executed step (two panels on one time axis, a self-contained
HTML file). A bar is a span with its hover text: compute fills most of its device's row,
point-to-point transfers and collectives get thin lanes under it, so communication that
overlaps compute stays visible. Plotly is imported inside the functions (the CLI must start
fast).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetplan.planspec.trace import COMPUTE_KINDS, IDLE, Span
from hetplan.report.palette import KIND_COLORS

# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from plotly.graph_objects import Figure

OTHER_COLOR = "#8c8c8c"
KIND_NAMES = {
    "fwd": "forward",
    "bwd": "backward",
    "optimizer": "optimizer step",
    "send": "send (point-to-point)",
    "recv": "receive (point-to-point)",
    "allreduce": "allreduce (gradient sync)",
    "ps_push": "push to parameter server",
    "ps_pull": "pull from parameter server",
    "tie": "tied-weight gradient exchange",
}
"""Legend names of the action kinds, in legend order."""
P2P = frozenset({"send", "recv"})
LANES = {"compute": (-0.42, 0.5), "p2p": (0.12, 0.13), "collective": (0.27, 0.13)}
"""Bar placement within a device row (row pitch 1): (offset, width)."""
LEGEND = {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0}
MARGIN = {"l": 10, "r": 10, "t": 30, "b": 50}
ROW_PX = 34  # height of one device row, pixels
PANEL_PX = 110  # axes, title and legend of one panel, pixels


@dataclass(frozen=True, slots=True)
class GanttBar:
    """One span on its device's row, with its hover text (plotly's HTML subset, escaped)."""

    span: Span
    hover: str
    op: int = -1
    """Index of the action in its simulated schedule (-1: an executed span)."""

    @property
    def row(self) -> str:
        return self.span.device

    @property
    def kind(self) -> str:
        return self.span.kind

    @property
    def start_s(self) -> float:
        return self.span.start

    @property
    def end_s(self) -> float:
        return self.span.end


@dataclass(frozen=True, kw_only=True)
class Panel:
    """One trace of a chart: its title and bars."""

    title: str
    bars: Sequence[GanttBar]


def span_hover(s: Span) -> str:
    """A plain hover for a span: kind, device, where in the plan, and its times."""
    head = f"<b>{html.escape(kind_name(s.kind))}</b>"
    lines = [head + (f" (part {s.part})" if s.part >= 0 else "")]
    lines.append(f"device {html.escape(s.device)}")
    if s.stage >= 0:
        lines.append(f"stage {s.stage}")
    if s.microbatch >= 0:
        lines.append(f"micro-batch {s.microbatch}")
    lines.append(f"start {1e3 * s.start:.3f} ms, duration {1e3 * s.duration:.3f} ms")
    return "<br>".join(lines)


def bars_of(spans: Sequence[Span]) -> list[GanttBar]:
    """Every span but idle gaps as a bar with :func:`span_hover`."""
    return [GanttBar(span=s, hover=span_hover(s)) for s in spans if s.kind != IDLE]


def kind_name(kind: str) -> str:
    return KIND_NAMES.get(kind, kind)


def _lane(kind: str) -> tuple[float, float]:
    if kind in P2P:
        return LANES["p2p"]
    return LANES["compute"] if kind in COMPUTE_KINDS else LANES["collective"]


def gantt_figure(
    rows: Sequence[str],
    panels: Sequence[Panel],
    *,
    kinds: Sequence[str] | None = None,
    window: tuple[float, float] | None = None,
    xlabel: str = "time in the iteration (ms)",
) -> Figure:
    """Panels stacked on one time axis, a row per device of ``rows`` (top to bottom); a legend
    entry per kind (``kinds``: their order; default: as met); ``window``: a shaded span."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[p.title for p in panels])  # fmt: skip
    order = list(kinds or dict.fromkeys(b.kind for p in panels for b in p.bars))
    shown, legended = set(rows), set()
    for k, panel in enumerate(panels, start=1):
        for kind in order:
            bars = [b for b in panel.bars if b.kind == kind and b.row in shown]
            first = kind not in legended and (bool(bars) or k == len(panels))
            legended |= {kind} if first else set()
            offset, width = _lane(kind)
            fig.add_trace(
                go.Bar(
                    name=kind_name(kind), legendgroup=kind, showlegend=first, orientation="h",
                    y=[b.row for b in bars], x=[1e3 * b.span.duration for b in bars],
                    base=[1e3 * b.start_s for b in bars], offset=offset, width=width,
                    marker={"color": KIND_COLORS.get(kind, OTHER_COLOR), "line": {"width": 0}},
                    hovertext=[b.hover for b in bars], hoverinfo="text",
                ),
                row=k, col=1,
            )  # fmt: skip
        fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(rows),
                         range=[len(rows) - 0.5, -0.5], title_text="device",
                         row=k, col=1)  # fmt: skip
        if window is not None:
            fig.add_vrect(x0=1e3 * window[0], x1=1e3 * window[1], fillcolor="#999",
                          opacity=0.12, line_width=0, layer="below", row=k, col=1)  # fmt: skip
    fig.update_xaxes(showgrid=True, gridcolor="#eee", rangemode="tozero")
    fig.update_xaxes(title_text=xlabel, row=len(panels), col=1)
    fig.update_layout(
        barmode="overlay", margin=MARGIN, legend=LEGEND, plot_bgcolor="white",
        height=max(320, len(panels) * (PANEL_PX + ROW_PX * len(rows))),
    )  # fmt: skip
    return fig


def gantt_page(fig: Figure, title: str) -> str:
    """A self-contained HTML page of one chart (plotly.js inline: it opens offline)."""
    config = {"displaylogo": False, "responsive": True}
    body: str = fig.to_html(full_html=False, include_plotlyjs=True, div_id="gantt",
                            config=config)  # fmt: skip
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"</head><body><h3>{html.escape(title)}</h3>{body}</body></html>"
    )
