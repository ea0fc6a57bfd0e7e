"""One plan as a self-contained interactive HTML page (plotly, embedded inline: works offline).

The page shows a header with the prediction's figures, an interactive Gantt chart of the
simulated iteration (device rows, time in ms, one legend entry per action kind), per-device
memory against capacity, and, when a search priced several candidates, their time-energy
scatter with the Pareto front. Plotly is imported only when a page is rendered
(:mod:`hetplan.report.plan_page_figures`): the CLI must start without it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hetplan.report.plan_page_data import (
    MAX_BARS,
    MAX_ROWS,
    GanttData,
    MemoryRow,
    ParetoPoint,
    gantt_data,
    memory_rows,
    stage_layers,
    summary,
)
from hetplan.serde import write_text_atomic

# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from plotly.graph_objects import Figure

    from hetplan.planspec import Plan
    from hetplan.predict.predict import Prediction

__all__ = ["ParetoPoint", "render_plan_page", "write_plan_page"]

GLOSSARY = [
    ("iteration", "one optimizer step: the global batch through forward and backward."),
    ("forward / backward", "compute of a pipeline stage for one micro-batch."),
    ("send / receive", "point-to-point transfer of activations or gradients between stages."),
    ("allreduce", "gradient synchronisation among the replicas of a stage (per bucket)."),
    ("push / pull", "gradients to and weights from the parameter-server shards."),
    ("optimizer step", "the weight update on each device."),
    ("replica", "one data-parallel copy of the model (a pipeline)."),
    ("stage", "a contiguous slice of layers on one device (or one tensor-parallel group)."),
    ("micro-batch", "a slice of a replica's batch that flows through the pipeline."),
    ("bubble", "time a device waits: neither computing nor held up by communication."),
    ("exposed communication", "communication time not hidden behind compute."),
    ("Pareto front", "candidates that no other candidate beats in both time and energy."),
]
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em auto;
max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.6em}
table.summary{border-collapse:collapse} .summary td{padding:2px 12px 2px 0}
.summary td:first-child{color:#555}
.ok{color:#1a7f37;font-weight:600} .bad{color:#c62828;font-weight:600}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em;margin:.5em 0}
dl.glossary{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1.2em}
dl.glossary dt{font-weight:600} dl.glossary dd{margin:0} .muted{color:#666}
"""


def write_plan_page(
    path: Path,
    prediction: Prediction,
    *,
    title: str,
    pareto: Sequence[ParetoPoint] = (),
    chosen: ParetoPoint | None = None,
    plan: Plan | None = None,
    max_rows: int = MAX_ROWS,
    max_bars: int = MAX_BARS,
    notes: Sequence[str] = (),
) -> None:
    """Write the page for ``prediction`` to ``path`` atomically (see :func:`render_plan_page`)."""
    page = render_plan_page(
        prediction,
        title=title,
        pareto=pareto,
        chosen=chosen,
        plan=plan,
        notes=notes,
        max_rows=max_rows,
        max_bars=max_bars,
    )
    write_text_atomic(path, page)


def render_plan_page(
    prediction: Prediction,
    *,
    title: str,
    pareto: Sequence[ParetoPoint] = (),
    chosen: ParetoPoint | None = None,
    plan: Plan | None = None,
    max_rows: int = MAX_ROWS,
    max_bars: int = MAX_BARS,
    notes: Sequence[str] = (),
) -> str:
    """The page as one HTML string, plotly.js inline once; ``notes``: the search's (what it
    kept out, e.g. no tensor-parallel plan for a block torch.fx could not trace), shown under
    the header with the prediction's own.

    ``plan`` (optional) names each stage's layers in the Gantt's hover text; ``pareto``: every
    candidate a search priced, ``chosen`` the one this page shows (starred); ``max_rows`` and
    ``max_bars`` cap the charts, and the page says what they left out.
    """
    from hetplan.report import plan_page_figures as figs

    gantt = gantt_data(
        prediction,
        layers=stage_layers(plan) if plan is not None else None,
        max_rows=max_rows,
        max_bars=max_bars,
    )
    memory = memory_rows(prediction, max_rows=max_rows)
    parts = [_header(prediction, title, chosen)]
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    parts += ["<h2>Simulated iteration</h2>", _gantt_caption(gantt)]
    parts.append(_div(figs.gantt_figure(gantt), "gantt", plotlyjs=True))
    parts += ["<h2>Memory per device</h2>", _memory_caption(prediction, memory)]
    parts.append(_div(figs.memory_figure(memory), "memory", plotlyjs=False))
    parts.append("<h2>Time and energy of the candidates</h2>")
    if pareto:
        parts.append(
            f"<p>{len(pareto)} candidates priced by the search, "
            f"{sum(p.on_front for p in pareto)} of them on the Pareto front (connected)"
            + ("; the star marks the plan of this page.</p>" if chosen else ".</p>")
        )
        parts.append(_div(figs.pareto_figure(pareto, chosen), "pareto", plotlyjs=False))
    else:
        parts.append(
            "<p>This page came from <code>predict</code> for one explicit plan: no search, "
            "so there are no other candidates to compare.</p>"
        )
    parts.append(_glossary())
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def _div(fig: Figure, div_id: str, *, plotlyjs: bool) -> str:
    """The figure as a ``<div>`` with a fixed id (reproducible pages)."""
    config = {"displaylogo": False, "responsive": True}
    out: str = fig.to_html(full_html=False, include_plotlyjs=plotlyjs, div_id=div_id,
                           config=config)  # fmt: skip
    return out


def _header(p: Prediction, title: str, chosen: ParetoPoint | None) -> str:
    rows = []
    for term, value in summary(p):
        cls = ""
        if term == "feasible":
            cls = ' class="ok"' if p.feasible else ' class="bad"'
        rows.append(f"<tr><td>{html.escape(term)}</td><td{cls}>{html.escape(value)}</td></tr>")
    out = [f"<h1>{html.escape(title)}</h1>"]
    if chosen is not None:
        out.append(f'<p class="muted">plan: {html.escape(chosen.label)}</p>')
    out.append(f'<table class="summary">{"".join(rows)}</table>')
    out += [f'<p class="note">infeasible: {html.escape(r)}</p>' for r in p.infeasible_reasons]
    out += [f'<p class="note">{html.escape(n)}</p>' for n in p.notes]
    return "\n".join(out)


def _gantt_caption(g: GanttData) -> str:
    text = (
        "<p>Predicted schedule: one row per device, one bar per action on each device it "
        f"occupies ({len(g.bars)} of {g.total_bars} bars drawn). Compute fills the row; "
        "point-to-point transfers and collectives run in the thin lanes under it. Hover a bar "
        "for its details; drag to zoom, double-click to reset; click a legend entry to hide "
        "a kind.</p>"
    )
    if g.window is not None:
        w0, w1 = (1e3 * t for t in g.window)
        text += (
            "<p>This schedule is simulated over several iterations to reach a steady state; "
            f"the shaded span ({w0:.3f} to {w1:.3f} ms) is where throughput is measured.</p>"
        )
    return text + "".join(f'<p class="note">{html.escape(o)}</p>' for o in g.omitted)


def _memory_caption(p: Prediction, rows: Sequence[MemoryRow]) -> str:
    text = (
        "<p>Predicted peak memory of each device against its capacity, in decimal "
        "gigabytes (1 GB = 10<sup>9</sup> bytes); the label over each bar is its share of the "
        "capacity. Red bars exceed the capacity; hover a bar for the breakdown.</p>"
    )
    if len(p.devices) > len(rows):
        over = sum(d.memory_bytes > d.memory_capacity_bytes for d in p.devices)
        text += (
            f'<p class="note">Only the first {len(rows)} of {len(p.devices)} devices are '
            f"drawn; {over} of all {len(p.devices)} exceed their capacity.</p>"
        )
    return text


def _glossary() -> str:
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in GLOSSARY)
    return f'<h2>Glossary</h2>\n<dl class="glossary">{items}</dl>'
