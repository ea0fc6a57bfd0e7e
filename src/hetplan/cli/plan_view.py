"""Printing a ranking: the ranked table, the winner's stage map, reasons, Pareto front."""

from __future__ import annotations

import json
import math
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from hetplan.cli.output import console
from hetplan.plan.explain import outside_text
from hetplan.plan.search import Ranked, Ranking
from hetplan.plan.staleness import is_asynchronous, staleness_of, staleness_text
from hetplan.planspec import PIPELINED, PipelinePlan, Plan
from hetplan.predict import DevicePrediction
from hetplan.predict.error_bars import ties_under
from hetplan.serde import to_data
from hetplan.units import (
    BYTES_NOTE,
    fmt_bytes,
    fmt_dollars,
    fmt_duration,
    fmt_joules,
    fmt_percent,
    plural,
)

MAX_GROUPS = 16
"""Most pipeline groups the winner's stage map prints (the plan file lists every pipeline)."""
MAX_STAGES = 8
"""Most stages printed per pipeline group; a longer pipeline shows its first and last ones."""
PLAN_WIDTH = 60
"""Most characters of a plan label kept on one line of the table."""
LEGEND_WIDTH = 120
"""Widest line of the legend below the table."""
SHOWN_IDS = 3
MAX_TUNE_TOP = 5
"""Plans the suggested ``tune`` measures at most."""
"""Device ids listed before ``... (+N more)``."""


def _row_order(r: Ranked) -> tuple[bool, bool, float]:
    """Plans within the limits first; among them, as ranked: those that fit with the
    feasibility margin, then those that may not fit; by score."""
    return bool(r.outside_limits), r.prediction.memory_verdict != "fits", r.score


def table_rows(ranking: Ranking, top: int) -> list[Ranked]:
    """The best plan of each family and the baselines, best first, at most ``top``."""
    rows: list[Ranked] = []
    seen: set[str] = set()
    extra = [b for b in ranking.baselines.values() if b not in ranking.ranked]
    # A baseline outside the limits is shown for comparison, after every plan that can win.
    for r in sorted([*ranking.ranked, *extra], key=_row_order):
        if r.candidate.baseline is not None:
            rows.append(r)
        elif r.candidate.family not in seen:
            rows.append(r)
            seen.add(r.candidate.family)
    return rows[:top]


@dataclass
class TableRow:
    """One row of the ranked table: a plan, and the other table rows that are the same plan."""

    ranked: Ranked
    also: list[Ranked] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The plan's label, its baseline tag, and what else it stands for."""
        c = self.ranked.candidate
        tags = [f"{c.baseline} baseline"] if c.baseline else []
        if self.ranked.outside_limits:
            tags.append(outside_text(self.ranked))
        text = c.label + (f" ({'; '.join(tags)})" if tags else "")
        if self.also:
            names = dict.fromkeys(_row_name(r) for r in self.also)
            text += f" (also: {', '.join(names)})"
        return text


def _row_name(r: Ranked) -> str:
    c = r.candidate
    return f"{c.baseline} baseline" if c.baseline else c.family


def _plan_key(plan: Plan) -> str:
    """Equal for plans that run the same way: a single-stage pipeline is scheduled alike by
    every pipelined strategy (gpipe, 1f1b and pipedream differ only across stages)."""
    data = to_data(plan)
    if plan.strategy in PIPELINED and len(plan.pipelines) == 1 and plan.num_stages == 1:
        data["strategy"] = "single-stage pipeline"
    return json.dumps(data, sort_keys=True)


def _same_figures(a: Ranked, b: Ranked) -> bool:
    pa, pb = a.prediction, b.prediction
    return math.isclose(pa.iteration_time_s, pb.iteration_time_s, rel_tol=1e-9) and math.isclose(
        pa.energy_j_per_iteration, pb.energy_j_per_iteration, rel_tol=1e-9
    )


def table_groups(ranking: Ranking, top: int) -> list[TableRow]:
    """:func:`table_rows` with rows of the same plan merged into the best of them, at most
    ``top``."""
    out: list[TableRow] = []
    by_key: dict[str, TableRow] = {}
    for r in table_rows(ranking, sys.maxsize):
        key = _plan_key(r.candidate.plan)
        first = by_key.get(key)
        if first is not None and _same_figures(first.ranked, r):
            first.also.append(r)
            continue
        row = TableRow(ranked=r)
        by_key.setdefault(key, row)
        out.append(row)
    return out[:top]


def _mem_free(r: Ranked) -> str:
    devs = r.prediction.devices
    if not devs:
        return "-"
    tight = " ?" if r.prediction.memory_verdict != "fits" else ""
    return fmt_percent(min(1.0 - d.memory_bytes / d.memory_capacity_bytes for d in devs)) + tight


def _price_column(rows: Sequence[TableRow]) -> str | None:
    """``$/epoch`` (or ``$/it`` without a dataset size) when a row has a price, else None."""
    preds = [row.ranked.prediction for row in rows]
    if not any(p.dollars_per_iteration is not None for p in preds):
        return None
    by_epoch = all(
        p.dollars_per_epoch is not None for p in preds if p.dollars_per_iteration is not None
    )
    return "$/epoch" if by_epoch else "$/it"


def _price(r: Ranked, column: str) -> str:
    p = r.prediction
    usd = p.dollars_per_epoch if column == "$/epoch" else p.dollars_per_iteration
    return "-" if usd is None else fmt_dollars(usd)


def _samples(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _epoch(r: Ranked) -> str:
    s = r.prediction.epoch_time_s
    return "-" if s is None else fmt_duration(s, short=True)


@dataclass(frozen=True)
class Column:
    """A column of the ranked table after ``#`` and ``plan``."""

    head: str
    cell: Callable[[Ranked], str]
    legend: str = ""
    """What the column means, for the legend under the table (empty: self-explanatory)."""
    wide: bool = False
    """Shown with ``--wide`` only: the default table fits 100 columns."""


COLUMNS = (
    Column("devices", lambda r: str(r.metrics.devices)),
    Column(
        "staleness",
        lambda r: staleness_text(r.candidate.plan),
        "staleness: sync, or how far the weights of an asynchronous plan may lag "
        "(it: iterations; WSP D: waves)",
        wide=True,
    ),
    Column(
        "iteration",
        lambda r: fmt_duration(r.prediction.iteration_time_s, short=True),
        "iteration: one optimizer step over the global batch",
    ),
    Column(
        "80% interval",
        lambda r: r.prediction.interval.text() if r.prediction.interval else "-",
        "80% interval: where the measured iteration should fall, from hetplan's measured error "
        "(docs/planning.md)",
        wide=True,
    ),
    Column("epoch", _epoch, "epoch: one pass over the dataset (- without a dataset size)"),
    Column(
        "samples/s",
        lambda r: _samples(r.prediction.samples_per_s),
        "samples/s: training throughput",
    ),
    Column(
        "mem free",
        _mem_free,
        "mem free: smallest fraction of memory left free on any device of the plan (?: may "
        "not fit with the feasibility margin, docs/cost-models.md section 6)",
    ),
    Column(
        "power W",
        lambda r: f"{r.prediction.power_w:.0f}",
        "power W: mean power of the plan's devices over the iteration",
        wide=True,
    ),
    Column(
        "energy/it",
        lambda r: fmt_joules(r.prediction.energy_j_per_iteration),
        "energy/it: energy of the plan's devices per iteration",
    ),
    Column(
        "EDP J*s/it",
        lambda r: f"{r.metrics.edp:.3g}",
        "EDP J*s/it: energy-delay product per iteration (energy/it x iteration)",
        wide=True,
    ),
)
STALENESS_TAG = (
    "async ≤N it, WSP D=N: how far the weights of an asynchronous plan may lag (iterations; waves)"
)
"""The legend of the staleness tag the default table puts in the plan cell instead of the
staleness column."""


def _price_col(price: str) -> Column:
    per = "epoch" if price == "$/epoch" else "iteration"
    legend = f"{price}: rental cost of the plan's devices per {per} (list prices)"
    return Column(price, lambda r: _price(r, price), legend, wide=True)


def table_columns(rows: Sequence[TableRow], wide: bool) -> list[Column]:
    """The columns shown: every one with ``wide``, else those that fit 100 columns."""
    price = _price_column(rows)
    cols = [*COLUMNS, *([_price_col(price)] if price else [])]
    return [c for c in cols if wide or not c.wide]


def _legend(
    cols: Sequence[Column], rows: Sequence[TableRow], wide: bool, ties: bool = False
) -> str:
    """The meaning of the columns shown (and of the staleness tag and the tie mark), and what
    ``--wide`` adds."""
    parts = [c.legend for c in cols if c.legend]
    if not wide and any(is_asynchronous(row.ranked.candidate.plan) for row in rows):
        parts.append(STALENESS_TAG)
    if ties:
        parts.append(TIE_LEGEND)
    if not wide:
        shown = {c.head for c in cols}
        hidden = [c.head for c in table_columns(rows, wide=True) if c.head not in shown]
        parts.append(f"--wide adds {', '.join(hidden)}")
    return "; ".join(parts)


def _plan_cell(row: TableRow, wide: bool) -> str:
    """The plan's label, and in dim what else the row is: its baseline tag, the plans it
    stands for, its staleness where the table has no staleness column."""
    r = row.ranked
    tag = row.label[len(r.candidate.label) :].strip()
    plan = r.candidate.plan
    if not wide and is_asynchronous(plan):
        tag = f"({staleness_text(plan)}) {tag}".strip()
    return r.candidate.label + (f" [dim]{tag}[/]" if tag else "")


def _cells(
    i: int, row: TableRow, cols: Sequence[Column], wide: bool, tie: bool = False
) -> list[str]:
    """The row's cells; ``#`` is ``-`` for a plan outside the limits (not in the ranking), and
    marked with :data:`TIE_MARK` for a plan that ties with the best."""
    rank = "-" if row.ranked.outside_limits else str(i) + (TIE_MARK if tie else "")
    return [rank, _plan_cell(row, wide), *(c.cell(row.ranked) for c in cols)]


TIE_MARK = "~"
TIE_LEGEND = (
    f"{TIE_MARK}: a tie with #1, their 80% intervals of the iteration time overlap: the "
    "ranking cannot tell them apart"
)


def table_ties(ranking: Ranking, rows: Sequence[TableRow]) -> list[bool]:
    """Per table row, whether it ties with the first (:func:`ties_with_best`): only under a
    time objective (the intervals are of the iteration time), only rows that can win."""
    ties = ties_under(ranking.objective.name, [row.ranked.prediction.interval for row in rows])
    return [t and not row.ranked.outside_limits for t, row in zip(ties, rows, strict=True)]


def _plan_width(heads: Sequence[str], table: Sequence[Sequence[str]], labels: Sequence[str]) -> int:
    """Width of the plan column: its longest label (no tag) where the console has room, so
    that labels break only on narrow consoles; the other columns keep their natural width."""
    others = sum(
        max(len(h), *(len(cells[k]) for cells in table)) + 3  # padding 2, border 1
        for k, h in enumerate(heads)
        if h != "plan"
    )
    room = console.width - others - 4  # the plan column's padding and border, the last border
    return max(len("plan"), min(max(map(len, labels)), PLAN_WIDTH, room))


def _print_table(ranking: Ranking, top: int, wide: bool) -> list[int]:
    """The ranked table and the legend of the columns it shows; the table numbers of the rows
    that tie with #1."""
    rows = table_groups(ranking, top)
    cols = table_columns(rows, wide)
    heads = ["#", "plan", *(c.head for c in cols)]
    ties = table_ties(ranking, rows)
    table = [
        _cells(i, row, cols, wide, tie)
        for i, (row, tie) in enumerate(zip(rows, ties, strict=True), 1)
    ]
    width = _plan_width(heads, table, [row.ranked.candidate.label for row in rows])
    t = Table(title=f"best plans per strategy family (objective: {ranking.objective.name})")
    for col in heads:
        t.add_column(
            col,
            justify="left" if col in ("plan", "staleness") else "right",
            min_width=width if col == "plan" else None,
        )
    for cells in table:
        t.add_row(*cells)
    console.print(t)
    legend_width = max(60, min(console.width, LEGEND_WIDTH))
    legend = _legend(cols, rows, wide, any(ties))
    for line in textwrap.wrap(legend, width=legend_width):
        console.print(line, markup=False)
    return [i for i, tie in enumerate(ties, 1) if tie]


def tie_lines(
    ranking: Ranking, tied: Sequence[int], tune: str | None, width: int = LEGEND_WIDTH
) -> list[str]:
    """What the ties mean for the user: the best's interval and basis, and how to measure
    them; every line within ``width``."""
    best = ranking.best.prediction.interval
    if best is None:
        return []
    head = (
        f"iteration of #1: {fmt_duration(ranking.best.prediction.iteration_time_s)}, 80% "
        f"interval {best.text()} ({best.basis})"
    )
    if not tied:
        return [head + "; no other plan's interval reaches it"]
    which = ", ".join(f"#{i}" for i in tied)
    lines = [head, f"{which} tie with #1 within the model's error: measuring tells them apart"]
    if tune is not None:
        lines.append("measure them:")
        lines += command_lines(f"{tune} --top {min(len(tied) + 1, MAX_TUNE_TOP)}", width)
    return [x for line in lines for x in _wrapped(line, width)]


def _wrapped(line: str, width: int) -> list[str]:
    """Prose wrapped to ``width``; command lines (indented) are broken already."""
    if line.startswith("  "):
        return [line]
    return textwrap.wrap(line, width=width, subsequent_indent="  ")


def command_lines(command: str, width: int = LEGEND_WIDTH) -> list[str]:
    """``command`` indented, broken between its words with shell continuations so that every
    line fits ``width``: pasted as is, it runs."""
    lines: list[str] = []
    current = " "
    for word in command.split(" "):
        if len(current) + 1 + len(word) + 2 > width and current.strip():
            lines.append(current + " \\")
            current = "     "
        current += " " + word
    return [*lines, current]


def print_ranking(
    ranking: Ranking, top: int, seconds: float, *, wide: bool = False, tune: str | None = None
) -> None:
    """The ranked table (every column with ``wide``), its legend, the ties with the best
    (``tune``: the command that would measure them, without ``--top``), the winner's stage map,
    the reasons and the Pareto front."""
    tied = _print_table(ranking, top, wide)
    for line in tie_lines(ranking, tied, tune, max(60, min(console.width, LEGEND_WIDTH))):
        console.print(line, markup=False, soft_wrap=True)
    for name, why in ranking.baseline_failures.items():
        console.print(f"baseline {name}: infeasible ({why})")
    _print_stage_map(ranking.best)
    for reason in ranking.reasons:
        console.print(f"- {reason}")
    for note in ranking.notes:
        console.print(f"note: {note}", markup=False)
    front = ", ".join(
        f"{fmt_duration(r.metrics.time_s)} / {fmt_joules(r.metrics.energy_j)}"
        for r in ranking.pareto
    )
    console.print(f"time-energy Pareto front (iteration / energy per iteration): {front}")
    console.print(
        f"searched {plural(ranking.screened, 'candidate')}, simulated {ranking.simulated}, "
        f"in {seconds:.2f} s"
    )


# ------------------------------------------------------------------------ the stage map


def _abbreviate(items: Sequence[str], shown: int = SHOWN_IDS) -> str:
    """``a, b, c ... (+N more)`` when there are more than ``shown + 1`` items."""
    if len(items) <= shown + 1:
        return ", ".join(items)
    return f"{', '.join(items[:shown])} ... (+{len(items) - shown} more)"


def index_ranges(indices: Sequence[int], shown: int = 4) -> str:
    """Sorted indices as ranges: ``0-3, 7, 9-12``; after ``shown`` ranges, ``... (+N more)``."""
    runs: list[tuple[int, int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    text = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(text) <= shown + 1:
        return ", ".join(text)
    rest = sum(b - a + 1 for a, b in runs[shown:])
    return f"{', '.join(text[:shown])} ... (+{rest} more)"


def _span(layers: Sequence[str]) -> str:
    return layers[0] if len(layers) == 1 else f"{layers[0]}..{layers[-1]}"


def _range(values: Sequence[float]) -> str:
    """``12.30 MB``, or ``12.30-13.10 MB`` (``980.00 MB-1.02 GB`` across units)."""
    lo, hi = fmt_bytes(min(values)), fmt_bytes(max(values))
    if lo == hi:
        return lo
    (lo_n, lo_u), hi_u = lo.split(" "), hi.split(" ")[1]
    return f"{lo_n}-{hi}" if lo_u == hi_u else f"{lo}-{hi}"


def _types(ids: Sequence[str], mem: dict[str, DevicePrediction]) -> tuple[str, ...]:
    return tuple(mem[d].type if d in mem else "?" for d in ids)


def _group_key(pipe: PipelinePlan, mem: dict[str, DevicePrediction]) -> tuple[Any, ...]:
    """Pipelines alike but for their device ids: same layer spans, device types, batch."""
    stages = tuple((tuple(s.layers), _types(s.devices, mem)) for s in pipe.stages)
    return (pipe.batch, stages)


def _stage_text(stage: int, pipes: Sequence[PipelinePlan], mem: dict[str, DevicePrediction]) -> str:
    """One stage of a group of alike pipelines: its layers, device types, ids and memory."""
    layers = pipes[0].stages[stage].layers
    ids = [d for p in pipes for d in p.stages[stage].devices]
    counts = Counter(_types(pipes[0].stages[stage].devices, mem))
    kinds = ", ".join(t if n == 1 else f"{n}x {t}" for t, n in counts.items())
    known = [mem[d] for d in ids if d in mem]
    used = ""
    if known:
        used = (
            f": {_range([d.memory_bytes for d in known])} of "
            f"{_range([d.memory_capacity_bytes for d in known])}"
        )
    return f"[{_span(layers)} ({plural(len(layers), 'layer')}) on {kinds} {_abbreviate(ids)}{used}]"


def _stages_text(pipes: Sequence[PipelinePlan], mem: dict[str, DevicePrediction]) -> str:
    n = len(pipes[0].stages)
    if n <= MAX_STAGES:
        return " -> ".join(_stage_text(j, pipes, mem) for j in range(n))
    head = [_stage_text(j, pipes, mem) for j in range(MAX_STAGES - 2)]
    tail = [_stage_text(j, pipes, mem) for j in range(n - 2, n)]
    skipped = n - MAX_STAGES
    return " -> ".join([*head, f"... ({plural(skipped, 'more stage')}) ...", *tail])


def stage_map_lines(best: Ranked) -> list[str]:
    """The winner's pipelines, alike ones grouped: at most MAX_GROUPS + 2 lines."""
    plan = best.candidate.plan
    mem = {d.id: d for d in best.prediction.devices}
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, pipe in enumerate(plan.pipelines):
        groups.setdefault(_group_key(pipe, mem), []).append(i)
    lines = []
    for members in list(groups.values())[:MAX_GROUPS]:
        pipes = [plan.pipelines[i] for i in members]
        batch = pipes[0].batch
        if len(members) == 1:
            head = f"pipeline {members[0]} (batch {batch})"
        else:
            head = f"pipelines {index_ranges(members)} ({len(members)} x, batch {batch} each)"
        lines.append(f"  {head}: {_stages_text(pipes, mem)}")
    if len(groups) > MAX_GROUPS:
        rest = list(groups.values())[MAX_GROUPS:]
        count = sum(len(m) for m in rest)
        lines.append(
            f"  ... {plural(len(rest), 'more group')} of {plural(count, 'pipeline')} "
            "(the plan file lists every pipeline)"
        )
    if plan.ps_devices:
        lines.append(f"  parameter-server shards on {_abbreviate(plan.ps_devices)}")
    return lines


def _print_stage_map(best: Ranked) -> None:
    console.print(
        f"winner: {best.candidate.label} (cost source: {best.prediction.cost_source}); "
        f"memory: used of capacity per device ({BYTES_NOTE})",
        markup=False,
    )
    for line in stage_map_lines(best):
        console.print(line, markup=False)


def ranked_json(r: Ranked) -> dict[str, Any]:
    plan = r.candidate.plan
    return {
        "family": r.candidate.family,
        "label": r.candidate.label,
        "baseline": r.candidate.baseline,
        "score": r.score,
        "asynchronous": is_asynchronous(plan),
        "staleness": staleness_of(plan),
        "staleness_text": staleness_text(plan),
        "plan": to_data(plan),
        "prediction": r.prediction.to_json(),
        "outside_limits": list(r.outside_limits),
        "iteration_interval_s": _interval_json(r),
    }


def _interval_json(r: Ranked) -> list[float] | None:
    iv = r.prediction.interval
    return None if iv is None else [iv.low_s, iv.high_s]


def _ties(ranking: Ranking) -> list[bool]:
    """Per ranked candidate, whether it ties with the best (time objectives only)."""
    return ties_under(ranking.objective.name, [r.prediction.interval for r in ranking.ranked])


def ranking_json(ranking: Ranking, seconds: float) -> dict[str, Any]:
    """The ranking as plain data. A candidate listed several times (the best, the Pareto
    front, a baseline) is one object, converted once (megabytes for thousands of devices)."""
    done: dict[int, dict[str, Any]] = {}

    def one(r: Ranked) -> dict[str, Any]:
        if id(r) not in done:
            done[id(r)] = ranked_json(r)
        return done[id(r)]

    return {
        "objective": ranking.objective.name,
        "best": one(ranking.best),
        "candidates": [one(r) for r in ranking.ranked],
        "ties_with_best": [
            r.candidate.label for r, t in zip(ranking.ranked, _ties(ranking), strict=True) if t
        ],
        "baselines": {k: one(v) for k, v in ranking.baselines.items()},
        "baseline_failures": dict(ranking.baseline_failures),
        "rejected": dict(ranking.rejected),
        "pareto": [one(r) for r in ranking.pareto],
        "reasons": list(ranking.reasons),
        "notes": list(ranking.notes),
        "screened": ranking.screened,
        "simulated": ranking.simulated,
        "search_seconds": seconds,
        "time_limited": list(ranking.time_limited),
    }
