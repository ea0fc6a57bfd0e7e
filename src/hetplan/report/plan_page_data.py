"""What the plan page shows, as plain data: Gantt bars, memory rows, the header's figures.

No plotting here (:mod:`hetplan.report.plan_page_figures` draws it), so tests can check the
numbers without a browser. Every simulated action becomes one bar on each device row it occupies: a
send on its sender's row (``send``) and its receiver's (``recv``), a collective on every
participant's row. Caps on rows and bars never drop anything silently: each cut becomes a
sentence in :attr:`GanttData.omitted`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetplan.planspec.trace import Span
from hetplan.report.gantt import KIND_NAMES, GanttBar, kind_name
from hetplan.schedule.types import res_devices
from hetplan.units import fmt_bytes, fmt_duration, fmt_seconds

if TYPE_CHECKING:
    from hetplan.planspec import Plan
    from hetplan.predict.predict import Prediction

MAX_ROWS = 64
"""Device rows drawn by default (Gantt and memory charts)."""
MAX_BARS = 20_000
"""Gantt bars drawn by default (the earliest in time are kept)."""


@dataclass(frozen=True)
class ParetoPoint:
    """One priced candidate of a search, in plain numbers (the page needs no search types)."""

    label: str
    time_s: float
    energy_j: float
    on_front: bool


@dataclass(frozen=True, kw_only=True)
class GanttData:
    rows: list[str]
    """Device rows drawn, top to bottom."""
    bars: list[GanttBar]
    kinds: list[str]
    """Every kind in the timeline, in legend order (also kinds whose bars were all cut)."""
    total_bars: int
    """Bars of the whole timeline, before any cap."""
    omitted: list[str]
    """What the caps left out, in words (empty: everything is drawn)."""
    window: tuple[float, float] | None
    """Throughput window of a steady-state schedule (several iterations simulated)."""


@dataclass(frozen=True, kw_only=True)
class MemoryRow:
    device: str
    type: str
    role: str
    used_bytes: float
    capacity_bytes: float
    breakdown: dict[str, float]

    @property
    def over(self) -> bool:
        return self.used_bytes > self.capacity_bytes


def stage_layers(plan: Plan) -> dict[tuple[int, int], str]:
    """(pipeline, stage) -> its layers in words, e.g. ``embed … block1 (3 layers)``."""
    out: dict[tuple[int, int], str] = {}
    for p, pipe in enumerate(plan.pipelines):
        for s, stage in enumerate(pipe.stages):
            names = stage.layers
            n = len(names)
            span = names[0] if n == 1 else f"{names[0]} … {names[-1]}"
            out[(p, s)] = f"{span} ({n} layer{'s' if n != 1 else ''})" if names else "no layers"
    return out


def gantt_data(
    prediction: Prediction,
    *,
    layers: Mapping[tuple[int, int], str] | None = None,
    max_rows: int = MAX_ROWS,
    max_bars: int = MAX_BARS,
) -> GanttData:
    """The timeline's bars, at most ``max_rows`` device rows and ``max_bars`` bars."""
    tl = prediction.timeline
    sched = tl.schedule
    all_rows = list(sched.devices)
    rows = all_rows[:max_rows]
    shown = set(rows)
    raw: list[tuple[float, int, str, str]] = []  # (start, op, row, kind)
    kinds: set[str] = set()
    total = 0
    for i, act in enumerate(sched.actions):
        kinds.add(act.kind)
        seen: list[str] = []
        for res in act.resources:
            seen.extend(d for d in res_devices(res) if d not in seen)
        for dev in seen or [act.device]:
            kind = "recv" if act.kind == "send" and dev != act.device else act.kind
            kinds.add(kind)
            total += 1
            if dev in shown:
                raw.append((tl.start[i], i, dev, kind))
    omitted: list[str] = []
    if len(all_rows) > len(rows):
        omitted.append(
            f"Only the first {len(rows)} of {len(all_rows)} devices are drawn: the "
            f"{total - len(raw)} bars of the other {len(all_rows) - len(rows)} devices "
            "are left out."
        )
    if len(raw) > max_bars:
        raw.sort()
        cut = raw[max_bars][0]
        omitted.append(
            f"Only the first {max_bars} of these {len(raw)} bars in time order are drawn: "
            f"the {len(raw) - max_bars} bars starting at or after {cut * 1e3:.3f} ms are "
            "left out."
        )
        raw = raw[:max_bars]
    hidden = kinds - {kind for *_, kind in raw}
    if hidden:
        names = ", ".join(kind_name(k) for k in sorted(hidden, key=_kind_order))
        omitted.append(f"No bar of these kinds is drawn: {names}.")
    steady = bool(sched.marks)
    acts = sched.actions
    bars = [
        GanttBar(
            span=Span(device=dev, kind=kind, stage=acts[i].stage, microbatch=acts[i].microbatch,
                      part=acts[i].part, start=start, end=tl.end[i], pipeline=acts[i].pipeline,
                      iteration=acts[i].iteration, peer=acts[i].peer),
            hover=_hover(prediction, i, dev, kind, layers, steady),
            op=i,
        )
        for start, i, dev, kind in raw
    ]  # fmt: skip
    return GanttData(
        rows=rows,
        bars=bars,
        kinds=sorted(kinds, key=_kind_order),
        total_bars=total,
        omitted=omitted,
        window=tl.window if steady else None,
    )


def _kind_order(kind: str) -> tuple[int, str]:
    order = list(KIND_NAMES)
    return (order.index(kind) if kind in order else len(order), kind)


def _hover(
    prediction: Prediction,
    i: int,
    row: str,
    kind: str,
    layers: Mapping[tuple[int, int], str] | None,
    steady: bool,
) -> str:
    tl = prediction.timeline
    act = tl.schedule.actions[i]
    head = f"<b>{kind_name(kind)}</b>" + (f" (part {act.part})" if act.part >= 0 else "")
    lines = [head, f"device {html.escape(row)}"]
    if kind == "send" and act.peer:
        lines.append(f"to {html.escape(act.peer)}")
    elif kind == "recv":
        lines.append(f"from {html.escape(act.device)}")
    if act.stage >= 0:
        where = f"replica {act.pipeline}, stage {act.stage}"
        lay = (layers or {}).get((act.pipeline, act.stage))
        lines.append(where + (f": {html.escape(lay)}" if lay else ""))
    if act.microbatch >= 0:
        lines.append(f"micro-batch {act.microbatch}")
    if steady:
        lines.append(f"iteration {act.iteration}")
    if act.nbytes > 0:
        lines.append(f"bytes {fmt_bytes(act.nbytes)}")
    start, end = tl.start[i], tl.end[i]
    lines.append(f"start {start * 1e3:.3f} ms, duration {fmt_seconds(end - start)}")
    return "<br>".join(lines)


def memory_rows(prediction: Prediction, *, max_rows: int = MAX_ROWS) -> list[MemoryRow]:
    """Per-device predicted memory and capacity, the first ``max_rows`` devices."""
    return [
        MemoryRow(
            device=d.id,
            type=d.type,
            role=d.role,
            used_bytes=d.memory_bytes,
            capacity_bytes=d.memory_capacity_bytes,
            breakdown=dict(d.memory),
        )
        for d in prediction.devices[:max_rows]
    ]


def summary(prediction: Prediction) -> list[tuple[str, str]]:
    """The header's (term, value) pairs."""
    p = prediction
    out = [
        ("strategy", p.strategy),
        ("iteration time", fmt_duration(p.iteration_time_s)),
        ("throughput", f"{p.samples_per_s:,.1f} samples/s"),
        ("energy per iteration", f"{p.energy_j_per_iteration:,.3f} J"),
        ("power", f"{p.power_w:,.1f} W"),
        ("feasible", "yes" if p.feasible else "no"),
        ("global batch", f"{p.global_batch} samples"),
        ("micro-batch sizes", ", ".join(str(m) for m in p.micro_batch_sizes) or "-"),
        ("recompute", p.recompute),
        ("bubble fraction", f"{100 * p.bubble_fraction:.1f} %"),
        ("exposed communication", fmt_seconds(p.exposed_comm_s) + " per device"),
        ("devices", str(len(p.devices))),
        ("cost source", p.cost_source),
    ]
    if p.interval is not None:
        iv = p.interval
        out.insert(2, (f"{iv.coverage:.0%} interval", f"{iv.text()} ({iv.basis})"))
    if p.epoch_time_s is not None:
        out.insert(4, ("epoch time", fmt_duration(p.epoch_time_s)))
    if p.dollars_per_iteration is not None:
        out.append(("cost per iteration", f"${p.dollars_per_iteration:.6f}"))
    return out
